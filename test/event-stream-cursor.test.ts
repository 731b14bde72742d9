import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { advanceEventStreamCursor, claimUnpublishedEvents, eventStreamStatus, markEventsPublished } from '../src/ledger/event-stream.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import { newTenant, useScratchLedger, waitFor } from './support/harness.js';

/**
 * The event stream's claim reads the events after its cursor (migration 1763800000353), not every
 * event ever written: the plans PostgreSQL makes for the very SQL the claim sends, over tens of
 * thousands of acknowledged events, and the cases a cursor must never skip (a transaction that
 * commits its event after later ones were acknowledged; events from before the cursor existed).
 * A ledger of its own: the events here are written by hand and name objects no ledger holds, and
 * the stream's cursor is one per ledger.
 */
const h = useScratchLedger();

const acknowledgedEvents = 20_000;
const newEvents = 5;

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

function nodesOf(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(nodesOf)];
}

/**
 * Inserts `count` events of the tenant as the outbox's writers would (one object each); their ids.
 * `legacy`: without xact_id, as the rows written before the cursor existed.
 */
async function insertEvents(db: LedgerPool | pg.PoolClient, tenant: string, count: number, options: { legacy?: boolean } = {}): Promise<string[]> {
  const prefix = randomBytes(6).toString('hex');
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data${options.legacy ? ', xact_id' : ''})
     SELECT 'evt_' || md5($1 || g::text), $2, 'deposit.credited', 'deposit', 'dep_' || md5($1 || g::text), 1, '{"object": {}}'::jsonb${options.legacy ? ', NULL' : ''}
       FROM generate_series(1, $3::int) AS g
     RETURNING id`,
    [prefix, tenant, count],
  );
  return rows.map((row) => row.id);
}

/** Claims and acknowledges everything unacknowledged, as a publisher whose broker acknowledges every send. */
async function publishAll(): Promise<string[]> {
  const published: string[] = [];
  for (;;) {
    const claimed = await claimUnpublishedEvents(h.pool, 5_000);
    if (claimed.length === 0) return published;
    await markEventsPublished(h.pool, claimed.map((event) => event.id));
    published.push(...claimed.map((event) => event.id));
  }
}

async function cursor(): Promise<{ fromXact: bigint; legacyFromSeq: number; legacyToSeq: number }> {
  const { rows } = await h.pool.query<{ from_xact: string; legacy_from_seq: number; legacy_to_seq: number }>(
    'SELECT from_xact::text, legacy_from_seq, legacy_to_seq FROM event_stream_cursor',
  );
  return { fromXact: BigInt(rows[0]!.from_xact), legacyFromSeq: Number(rows[0]!.legacy_from_seq), legacyToSeq: Number(rows[0]!.legacy_to_seq) };
}

/** The xact_id (as a bigint) of the newest of these events. */
async function newestXactOf(ids: string[]): Promise<bigint> {
  const { rows } = await h.pool.query<{ x: string }>('SELECT max(xact_id::text::numeric)::text AS x FROM events WHERE id = ANY($1)', [ids]);
  return BigInt(rows[0]!.x);
}

/**
 * The SQL each ledger call sends, in order: the cursor's move is made for real (the claim's
 * parameters are the cursor it returns), everything else recorded and answered with nothing.
 */
async function sqlOf(call: (pool: LedgerPool) => Promise<unknown>): Promise<Array<{ text: string; values: unknown[] }>> {
  const sent: Array<{ text: string; values: unknown[] }> = [];
  const recorder = {
    query: async (text: string, values: unknown[] = []) => {
      sent.push({ text, values });
      return /UPDATE event_stream_cursor/.test(text) ? h.pool.query(text, values) : { rows: [] };
    },
  } as unknown as LedgerPool;
  await call(recorder);
  return sent;
}

/** EXPLAIN ANALYZE inside a transaction rolled back (the claim inserts its sends): rows the scans of events read, indexes used. */
async function explainOnEvents(sql: { text: string; values: unknown[] }) {
  const client = await h.pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode; 'Execution Time': number }> }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql.text}`, sql.values);
    const [root] = rows[0]!['QUERY PLAN'];
    const scans = nodesOf(root!.Plan).filter((node) => /Scan/.test(node['Node Type']) && node['Node Type'] !== 'Bitmap Index Scan' && node['Relation Name'] === 'events');
    return {
      indexes: scans.map((node) => node['Index Name'] ?? node['Node Type']),
      rowsRead: scans.reduce((sum, node) => sum + ((node['Actual Rows'] ?? 0) + (node['Rows Removed by Filter'] ?? 0)) * (node['Actual Loops'] ?? 1), 0),
      ms: root!['Execution Time'],
    };
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

/** The claim as it was before the cursor: every event, oldest first, probed for its acknowledgement. */
const claimWithoutCursor = {
  text: `SELECT e.* FROM events e
          WHERE NOT EXISTS (SELECT 1 FROM event_stream_publications p WHERE p.event_id = e.id AND p.published_at IS NOT NULL)
          ORDER BY e.seq LIMIT $1`,
  values: [200],
};

describe("the event stream's claim reads after its cursor, not the whole table", () => {
  it(`${newEvents} new events after ${acknowledgedEvents} acknowledged ones: the claim reads the new ones through events_by_xact; the walk from the oldest read them all`, { timeout: 120_000 }, async () => {
    const tenant = newTenant('stream-cursor');
    const old = await insertEvents(h.pool, tenant, acknowledgedEvents);
    expect((await publishAll()).length).toBe(acknowledgedEvents);
    // The cursor passes them once no transaction older than theirs runs anywhere on the server
    // (other test files' transactions hold it back for a moment).
    const oldXact = await newestXactOf(old);
    await waitFor(
      async () => {
        await advanceEventStreamCursor(h.pool);
        return (await cursor()).fromXact > oldXact;
      },
      { what: 'the cursor past the acknowledged events' },
    );
    const fresh = await insertEvents(h.pool, tenant, newEvents);
    await h.pool.query('ANALYZE events');

    const [advance, claim] = await sqlOf((pool) => claimUnpublishedEvents(pool, 200));
    expect(advance!.text).toMatch(/UPDATE event_stream_cursor/);
    const withCursor = await explainOnEvents(claim!);
    expect(withCursor.indexes).toContain('events_by_xact');
    // The new events, and nothing of the 20,000 acknowledged ones.
    expect(withCursor.rowsRead).toBe(newEvents);
    const withoutCursor = await explainOnEvents(claimWithoutCursor);
    expect(withoutCursor.rowsRead).toBeGreaterThanOrEqual(acknowledgedEvents);
    console.info(
      `event-stream-cursor: claim after the cursor read ${withCursor.rowsRead} events (${withCursor.indexes.join('+')}), ${withCursor.ms.toFixed(2)} ms; ` +
        `the walk from the oldest read ${withoutCursor.rowsRead} (${withoutCursor.indexes.join('+')}), ${withoutCursor.ms.toFixed(2)} ms`,
    );
    // The cursor's own move reads the same few rows: the advance after the claim's sends are acknowledged.
    expect(await publishAll()).toEqual(fresh);
    expect((await eventStreamStatus(h.pool)).unpublished).toBe(0);
  });

  it('an event whose transaction commits after later events were claimed and acknowledged is still claimed: the cursor stops below it', async () => {
    const tenant = newTenant('stream-cursor-late');
    await publishAll();
    const late = await h.pool.connect();
    try {
      await late.query('BEGIN');
      const [lateId] = await insertEvents(late, tenant, 1);
      const { rows } = await late.query<{ x: string }>('SELECT pg_current_xact_id()::text AS x');
      const lateXact = BigInt(rows[0]!.x);
      // Later events commit, are claimed and acknowledged; the cursor moves as far as it may.
      const early = await insertEvents(h.pool, tenant, 3);
      expect(await publishAll()).toEqual(early);
      await advanceEventStreamCursor(h.pool);
      expect((await cursor()).fromXact).toBeLessThanOrEqual(lateXact);
      await late.query('COMMIT');
      expect(await publishAll()).toEqual([lateId]);
      expect((await eventStreamStatus(h.pool)).unpublished).toBe(0);
    } finally {
      await late.query('ROLLBACK').catch(() => undefined);
      late.release();
    }
  });

  it('events written before the cursor existed (no xact_id) are claimed through the legacy seq range, which then closes', async () => {
    const tenant = newTenant('stream-cursor-legacy');
    await publishAll();
    // As the rows of a ledger upgraded to the cursor look: no xact_id, in the range the migration recorded.
    await h.pool.query('ALTER TABLE events DROP CONSTRAINT events_xact_id_written');
    try {
      const legacy = await insertEvents(h.pool, tenant, 4, { legacy: true });
      const seqs = await h.pool.query<{ min: number; max: number }>('SELECT min(seq)::int AS min, max(seq)::int AS max FROM events WHERE id = ANY($1)', [legacy]);
      await h.pool.query('UPDATE event_stream_cursor SET legacy_from_seq = $1, legacy_to_seq = $2', [seqs.rows[0]!.min, seqs.rows[0]!.max + 1]);
      expect((await eventStreamStatus(h.pool)).unpublished).toBe(legacy.length);
      // With a new event after them: the legacy ones first (seq order), then it.
      const [fresh] = await insertEvents(h.pool, tenant, 1);
      expect(await publishAll()).toEqual([...legacy, fresh]);
      await advanceEventStreamCursor(h.pool);
      const after = await cursor();
      expect(after.legacyFromSeq).toBe(after.legacyToSeq);
    } finally {
      await h.pool.query('ALTER TABLE events ADD CONSTRAINT events_xact_id_written CHECK (xact_id IS NOT NULL) NOT VALID');
    }
  });
});
