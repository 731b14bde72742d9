import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { eventStreamDefaults, EventStreamPublisher, type EventStreamSettings } from '../src/queue/event-stream.js';
import { EventStreamSource } from '../src/service/event-stream.js';
import { fundedTenant, newTenant, useScratchLedger, waitFor } from './support/harness.js';
import { TopicReader, useKafka } from './support/kafka.js';

// A ledger of its own: the events written here by hand name objects no ledger holds, which the
// outbox invariants (reconcile, all tenants) would rightly report in the suite's shared ledger.
const h = useScratchLedger();
const kafka = useKafka();

function settings(): EventStreamSettings {
  return { ...eventStreamDefaults, brokers: kafka.brokers, topic: `events-${randomBytes(4).toString('hex')}`, batchSize: 5, idleIntervalMs: 100, retryDelayMs: 200 };
}

function eventId(): string {
  return `evt_${randomBytes(12).toString('hex')}`;
}

let depositSnapshot: string | null = null;

/**
 * A deposit as the outbox stores it, taken from the event of a real deposit (the funded tenant's),
 * so that the publisher renders every event below as GET /v1/events does.
 */
async function storedDeposit(): Promise<string> {
  if (depositSnapshot !== null) return depositSnapshot;
  const tenant = await fundedTenant(h, { label: 'stream-template' });
  const { rows } = await h.pool.query<{ data: unknown }>(
    `SELECT data FROM events WHERE tenant = $1 AND type = 'deposit.credited' ORDER BY seq LIMIT 1`,
    [tenant],
  );
  expect(rows).toHaveLength(1);
  depositSnapshot = JSON.stringify(rows[0]!.data);
  return depositSnapshot;
}

/** Writes an event as the outbox's writers do (one object's events numbered 1, 2, 3 …). */
async function insertEvent(run: { query: (text: string, values: unknown[]) => Promise<unknown> }, tenant: string, objectId: string, sequence: number): Promise<string> {
  const id = eventId();
  const data = await storedDeposit();
  await run.query(
    `INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
     VALUES ($1, $2, 'deposit.credited', 'deposit', $3, $4, $5)`,
    [id, tenant, objectId, sequence, data],
  );
  return id;
}

async function tenantEventIds(tenant: string): Promise<string[]> {
  return (await h.pool.query<{ id: string }>('SELECT id FROM events WHERE tenant = $1 ORDER BY seq', [tenant])).rows.map((r) => r.id);
}

describe('the event stream: the outbox published to Kafka, keyed by object id, at least once', () => {
  it("every event on the topic, keyed by its object, each object's events in order; an event whose transaction committed late is not skipped", async () => {
    const tenant = newTenant('stream');
    const s = settings();
    const objects = ['ch_a', 'ch_b', 'ch_c'].map((o) => `${o}${randomBytes(3).toString('hex')}`);
    for (let sequence = 1; sequence <= 3; sequence++) for (const objectId of objects) await insertEvent(h.pool, tenant, objectId, sequence);
    // A transaction that took its seq first and commits last: a seq cursor would have passed it.
    const late = await h.pool.connect();
    let lateId = '';
    try {
      await late.query('BEGIN');
      lateId = await insertEvent(late, tenant, 'ch_late', 1);
      const early = await insertEvent(h.pool, tenant, 'ch_early', 1);
      const publisher = new EventStreamPublisher(new EventStreamSource(h.pool), s, { log: (line) => process.stderr.write(`${line}\n`) });
      await publisher.start();
      const reader = await TopicReader.open(kafka.brokers, [s.topic]);
      try {
        await waitFor(async () => reader.messages.some((m) => m.value.id === early), { what: 'the early event on the stream' });
        expect(reader.messages.some((m) => m.value.id === lateId)).toBe(false);
        await late.query('COMMIT');
        await waitFor(async () => reader.messages.some((m) => m.value.id === lateId), { what: 'the late-committing event on the stream' });
        const ids = await tenantEventIds(tenant);
        await waitFor(async () => ids.every((id) => reader.messages.some((m) => m.value.id === id)), { what: 'every event of the tenant on the stream' });
        const mine = reader.messages.filter((m) => m.value.tenant === tenant);
        expect(new Set(mine.map((m) => m.value.id))).toEqual(new Set(ids));
        for (const message of mine) {
          expect(message.key).toBe(message.value.object_id);
          expect(message.headers['cg-event-id']).toBe(message.value.id);
        }
        for (const objectId of objects) {
          expect(mine.filter((m) => m.key === objectId).map((m) => m.value.sequence)).toEqual([1, 2, 3]);
        }
      } finally {
        await publisher.stop();
        await reader.close();
      }
    } finally {
      late.release();
    }
  });

  it('a publisher stopped between the acknowledgement and its record loses nothing; the resent events are counted as possible duplicates', async () => {
    const tenant = newTenant('stream-crash');
    const s = settings();
    const objectId = `ch_${randomBytes(4).toString('hex')}`;
    for (let sequence = 1; sequence <= 4; sequence++) await insertEvent(h.pool, tenant, objectId, sequence);
    const source = new EventStreamSource(h.pool);
    const before = await source.status();
    let crashes = 0;
    const publisher = new EventStreamPublisher(source, s, {
      log: (line) => process.stderr.write(`${line}\n`),
      hooks: {
        afterSend(events) {
          // The first batch holding this tenant's events: acknowledged by the broker, not recorded.
          if (crashes === 0 && events.some((e) => e.tenant === tenant)) {
            crashes++;
            throw new Error('publisher stopped after the acknowledgement');
          }
        },
      },
    });
    await publisher.start();
    const reader = await TopicReader.open(kafka.brokers, [s.topic]);
    try {
      const ids = await tenantEventIds(tenant);
      await waitFor(async () => (await source.status()).unpublished === 0 || null, { what: 'every event acknowledged and recorded', timeoutMs: 60_000 });
      await waitFor(async () => ids.every((id) => reader.messages.some((m) => m.value.id === id)), { what: "the tenant's events on the stream" });
      // The resent copies were acknowledged by the broker (every event recorded), but the reader may
      // not have fetched them yet when it has one copy of each: wait for them, not for a first copy.
      const tenantMessages = () => reader.messages.filter((m) => m.value.tenant === tenant);
      await waitFor(async () => tenantMessages().length > ids.length, { what: "the resent copies of the tenant's events on the stream" });
      const mine = tenantMessages();
      expect(crashes).toBe(1);
      // At least once: some sent twice, none lost, and the first copies in order.
      expect(mine.length).toBeGreaterThan(ids.length);
      expect(new Set(mine.map((m) => m.value.id))).toEqual(new Set(ids));
      const firstSeen = [...new Map(mine.map((m) => [m.value.id, m.value.sequence])).values()];
      expect(firstSeen).toEqual([1, 2, 3, 4]);
      expect((await source.status()).possibleDuplicates).toBeGreaterThan(before.possibleDuplicates);
      const attempts = await h.pool.query<{ attempts: number }>(
        'SELECT p.attempts FROM event_stream_publications p JOIN events e ON e.id = p.event_id WHERE e.tenant = $1 ORDER BY e.seq',
        [tenant],
      );
      expect(attempts.rows.some((r) => r.attempts === 2)).toBe(true);
    } finally {
      await publisher.stop();
      await reader.close();
    }
  });
});
