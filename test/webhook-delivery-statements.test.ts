import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { deposit } from '../src/ledger/accounts.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import {
  claimDeliveries,
  createEndpoint,
  deleteEndpoint,
  deliveryCounts,
  eventsBehindCursor,
  recordCursorBatches,
  recordDelivered,
  requestRedelivery,
  rotateSecret,
  takeWork,
  updateEndpoint,
  type BatchAttempt,
  type CarriedOutcomes,
  type ClaimedDelivery,
  type CursorBatch,
  type DeliveredAttempt,
  type FinishedBatch,
} from '../src/ledger/webhook-endpoints.js';
import { webhookEndpointToWire } from '../src/service/webhook-endpoints.js';
import { newTenant, openAccount, useHarness, waitFor } from './support/harness.js';

/**
 * The deliverer's statements (docs/webhook-endpoints.md, How a delivery is made): the retry lane's
 * claim that returns everything an attempt needs and its successes recorded in one statement; the
 * take, which records what it carries and takes retry rows and cursor batches in one statement; a
 * cursor batch's record. The deliverer's behaviour end to end (retries, 410, rotation, SIGKILL) is
 * webhook-delivery.test.ts and webhook-delivery-cursor.test.ts.
 */
const h = useHarness();

/** The pool, counting the statements sent through it. */
function counted(): { pool: LedgerPool; statements: () => number } {
  let statements = 0;
  const pool = {
    query: (...args: unknown[]) => {
      statements += 1;
      return (h.pool.query as (...a: unknown[]) => unknown)(...args);
    },
  } as unknown as LedgerPool;
  return { pool, statements: () => statements };
}

/** A deposit's deposit.credited event; its id. Its first attempt is the endpoint's cursor's. */
async function depositEvent(tenant: string): Promise<string> {
  const made = await deposit(h.pool, tenant, 'wh', 100, `wh-${randomBytes(8).toString('hex')}`);
  const { rows } = await h.pool.query<{ id: string }>('SELECT id FROM events WHERE tenant = $1 AND object_id = $2', [tenant, `dep_${made.transferId}`]);
  return rows[0]!.id;
}

/** A deposit's event and a delivery row of it, due now (a redelivery asked for: a row of the retry lane); the event's id. */
async function dueRow(tenant: string, endpointId: string): Promise<string> {
  const eventId = await depositEvent(tenant);
  expect(await requestRedelivery(h.pool, tenant, endpointId, eventId)).toMatchObject({ deliveryId: expect.any(Number) });
  return eventId;
}

async function tenantWithEndpoint(label: string): Promise<{ tenant: string; endpointId: string; secret: string }> {
  const tenant = newTenant(label);
  await openAccount(h.pool, tenant, 'wh');
  // Nobody listens there: these tests never send.
  const { endpoint, secret } = await createEndpoint(h.pool, { tenant, url: 'http://127.0.0.1:9/hooks', enabledEvents: ['*'], description: null }, 16);
  return { tenant, endpointId: endpoint.id, secret };
}

const claim = (pool: LedgerPool, tenant: string, owner: string, perEndpointMax = 4) =>
  claimDeliveries(pool, { owner, leaseMs: 60_000, perEndpointMax, max: 8, onlyTenants: [tenant] });

/**
 * Waits until every event of the tenant is below the oldest transaction running on the server: what
 * a cursor may read (another test file's open transaction holds it back a moment).
 */
async function readable(tenant: string): Promise<void> {
  await waitFor(
    async () =>
      (
        await h.pool.query<{ ok: boolean }>(
          `SELECT coalesce((SELECT xact_id FROM events WHERE tenant = $1 AND xact_id IS NOT NULL ORDER BY xact_id DESC LIMIT 1) < pg_snapshot_xmin(pg_current_snapshot()), true) AS ok`,
          [tenant],
        )
      ).rows[0]!.ok,
    { what: "the tenant's events below the horizon" },
  );
}

/** A take of the tenant's work once its events are readable. */
async function take(pool: LedgerPool, tenant: string, owner: string, options: { perEndpointMax?: number; max?: number; carried?: CarriedOutcomes } = {}) {
  await readable(tenant);
  return takeWork(pool, { owner, leaseMs: 60_000, perEndpointMax: options.perEndpointMax ?? 4, max: options.max ?? 8, onlyTenants: [tenant], batchEventsMax: 64 }, options.carried);
}

/** A first attempt of a cursor batch's event: a 204, or the status given (a failure, retried at `retryAt`). */
const sent = (eventId: string, at: Date, status = 204, retryAt: Date | null = null): BatchAttempt => ({
  eventId,
  startedAt: at,
  durationMs: 3,
  statusCode: status,
  error: null,
  delivered: status < 300,
  gone: status === 410,
  retryAt,
});

/** The batch with every event sent and answered 204. */
const finish = (batch: CursorBatch): FinishedBatch => ({
  endpointId: batch.endpointId,
  from: batch.from,
  to: batch.to,
  attempts: batch.events.map(({ event }) => sent(event.id, new Date())),
});

const cursorOf = async (endpointId: string) =>
  (
    await h.pool.query<{ owner: string | null; slots: number; live: boolean | null }>(
      'SELECT cursor_owner AS owner, cursor_slots AS slots, cursor_lease_expires_at > now() AS live FROM webhook_endpoints WHERE id = $1',
      [endpointId],
    )
  ).rows[0]!;

const success = (delivery: ClaimedDelivery, durationMs = 3): DeliveredAttempt => ({
  deliveryId: delivery.id,
  endpointId: delivery.endpointId,
  eventId: delivery.event.id,
  attempt: delivery.attempt,
  startedAt: new Date(),
  durationMs,
  statusCode: 204,
});

describe("the deliverer's statements", () => {
  it('a claim is one statement: the lease, and with each delivery its event as stored and every live secret, newest first (both during a rotation)', async () => {
    const { tenant, endpointId, secret: first } = await tenantWithEndpoint('wds-claim');
    const rotated = (await rotateSecret(h.pool, tenant, endpointId, 3_600_000, 3))!;
    const eventId = await dueRow(tenant, endpointId);
    const { pool, statements } = counted();

    const claimed = await claim(pool, tenant, 'owner-a');
    expect(statements()).toBe(1);
    expect(claimed).toHaveLength(1);
    const [delivery] = claimed as [ClaimedDelivery];
    const stored = await h.pool.query('SELECT seq, id, tenant, type, object_type, object_id, object_sequence, data, created_at FROM events WHERE id = $1', [eventId]);
    expect(delivery.event).toEqual(stored.rows[0]);
    expect(delivery.event.type).toBe('deposit.credited');
    expect(delivery.secrets).toEqual([rotated.secret, first]);
    expect(delivery).toMatchObject({ endpointId, tenant, url: 'http://127.0.0.1:9/hooks', attempt: 1 });
    const row = await h.pool.query('SELECT lease_owner, attempts, lease_expires_at > now() AS leased FROM webhook_deliveries WHERE id = $1', [delivery.id]);
    expect(row.rows[0]).toEqual({ lease_owner: 'owner-a', attempts: 1, leased: true });

    // Leased: another process claims nothing. Once the overlap is over, only the new secret signs.
    expect(await claim(h.pool, tenant, 'owner-b')).toEqual([]);
    await h.pool.query('UPDATE webhook_endpoint_secrets SET expires_at = now() WHERE endpoint_id = $1 AND expires_at IS NOT NULL', [endpointId]);
    await dueRow(tenant, endpointId);
    const [next] = await claim(h.pool, tenant, 'owner-b');
    expect(next!.secrets).toEqual([rotated.secret]);
  });

  it("a claim counts every process's live leases against the endpoint's bound", async () => {
    const { tenant, endpointId } = await tenantWithEndpoint('wds-bound');
    for (let i = 0; i < 3; i += 1) await dueRow(tenant, endpointId);
    expect(await claim(h.pool, tenant, 'owner-a', 2)).toHaveLength(2);
    // Both slots are held (by owner-a): owner-b gets none, though a delivery is due.
    expect(await claim(h.pool, tenant, 'owner-b', 2)).toEqual([]);
    expect(await claim(h.pool, tenant, 'owner-b', 3)).toHaveLength(1);
  });

  it('successes are recorded in one statement: each attempt with its delivery delivered; a run of failures ends, a healthy endpoint row is not written', async () => {
    const { tenant, endpointId } = await tenantWithEndpoint('wds-success');
    await dueRow(tenant, endpointId);
    await dueRow(tenant, endpointId);
    const claimed = await claim(h.pool, tenant, 'owner-a');
    expect(claimed).toHaveLength(2);
    const endpointVersion = async () => (await h.pool.query<{ xmin: string }>('SELECT xmin::text FROM webhook_endpoints WHERE id = $1', [endpointId])).rows[0]!.xmin;
    const healthy = await endpointVersion();
    const { pool, statements } = counted();

    await recordDelivered(pool, [success(claimed[0]!)]);
    expect(statements()).toBe(1);
    expect(await endpointVersion()).toBe(healthy);

    await h.pool.query("UPDATE webhook_endpoints SET failing_since = now() - interval '1 hour' WHERE id = $1", [endpointId]);
    // Recorded whoever holds the lease now: the receiver has the event.
    await h.pool.query("UPDATE webhook_deliveries SET lease_owner = 'owner-b' WHERE id = $1", [claimed[1]!.id]);
    await recordDelivered(pool, [success(claimed[1]!)]);
    expect(statements()).toBe(2);

    const deliveries = await h.pool.query('SELECT id, state, lease_owner, lease_expires_at, finished_at IS NOT NULL AS finished FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id', [endpointId]);
    expect(deliveries.rows).toEqual(claimed.map((d) => ({ id: d.id, state: 'delivered', lease_owner: null, lease_expires_at: null, finished: true })));
    const attempts = await h.pool.query('SELECT delivery_id, event_id, attempt, status_code, error, delivered FROM webhook_delivery_attempts WHERE endpoint_id = $1 ORDER BY id', [endpointId]);
    expect(attempts.rows).toEqual(claimed.map((d) => ({ delivery_id: d.id, event_id: d.event.id, attempt: 1, status_code: 204, error: null, delivered: true })));
    const endpoint = await h.pool.query('SELECT failing_since FROM webhook_endpoints WHERE id = $1', [endpointId]);
    expect(endpoint.rows[0]).toEqual({ failing_since: null });
  });

  it('a batch of successes is all or none: one attempt the ledger refuses records none of them, and their deliveries stay leased', async () => {
    const { tenant, endpointId } = await tenantWithEndpoint('wds-atomic');
    await dueRow(tenant, endpointId);
    await dueRow(tenant, endpointId);
    const claimed = await claim(h.pool, tenant, 'owner-a');
    expect(claimed).toHaveLength(2);
    // A negative duration breaks the attempts table's check: the whole statement fails.
    await expect(recordDelivered(h.pool, [success(claimed[0]!), success(claimed[1]!, -1)])).rejects.toThrow(/duration_ms/);
    const deliveries = await h.pool.query("SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1 AND state = 'pending' AND lease_owner = 'owner-a'", [endpointId]);
    expect(deliveries.rows[0]).toEqual({ n: 2 });
    const attempts = await h.pool.query('SELECT count(*)::int AS n FROM webhook_delivery_attempts WHERE endpoint_id = $1', [endpointId]);
    expect(attempts.rows[0]).toEqual({ n: 0 });
    // Recorded again (as the deliverer would after the lease expired and the event was resent): both delivered.
    await recordDelivered(h.pool, claimed.map((d) => success(d)));
    const delivered = await h.pool.query("SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1 AND state = 'delivered'", [endpointId]);
    expect(delivered.rows[0]).toEqual({ n: 2 });
  });

  it('successes carried by the next claim: one statement records them and claims again, their slots counting as free', async () => {
    const { tenant, endpointId } = await tenantWithEndpoint('wds-carried');
    for (let i = 0; i < 3; i += 1) await dueRow(tenant, endpointId);
    const claimed = await claim(h.pool, tenant, 'owner-a', 2);
    expect(claimed).toHaveLength(2);
    const { pool, statements } = counted();

    // Both slots are held: only the successes recorded in the same transaction free them.
    const next = await claimDeliveries(pool, { owner: 'owner-a', leaseMs: 60_000, perEndpointMax: 2, max: 8, onlyTenants: [tenant] }, claimed.map((d) => success(d)));
    expect(statements()).toBe(1);
    expect(next).toHaveLength(1);
    expect(claimed.map((d) => d.id)).not.toContain(next[0]!.id);
    const deliveries = await h.pool.query<{ id: number; state: string; leased: boolean }>(
      'SELECT id, state, lease_expires_at IS NOT NULL AS leased FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id',
      [endpointId],
    );
    expect(deliveries.rows).toEqual([
      { id: claimed[0]!.id, state: 'delivered', leased: false },
      { id: claimed[1]!.id, state: 'delivered', leased: false },
      { id: next[0]!.id, state: 'pending', leased: true },
    ]);
    const attempts = await h.pool.query('SELECT delivery_id, delivered FROM webhook_delivery_attempts WHERE endpoint_id = $1 ORDER BY delivery_id', [endpointId]);
    expect(attempts.rows).toEqual(claimed.map((d) => ({ delivery_id: d.id, delivered: true })));

    // All or none: a success the ledger refuses fails the claim too, and nothing is claimed or recorded.
    await expect(
      claimDeliveries(h.pool, { owner: 'owner-a', leaseMs: 60_000, perEndpointMax: 2, max: 8, onlyTenants: [tenant] }, [success(next[0]!, -1)]),
    ).rejects.toThrow(/duration_ms/);
    const still = await h.pool.query("SELECT count(*)::int AS n FROM webhook_delivery_attempts WHERE endpoint_id = $1", [endpointId]);
    expect(still.rows[0]).toEqual({ n: 2 });
  });

  it('deleting an endpoint deletes its deliveries and, through them, every attempt (attempts are keyed by their delivery only)', async () => {
    const { tenant, endpointId } = await tenantWithEndpoint('wds-delete');
    await dueRow(tenant, endpointId);
    await dueRow(tenant, endpointId);
    const claimed = await claim(h.pool, tenant, 'owner-a');
    await recordDelivered(h.pool, [success(claimed[0]!)]);
    await h.pool.query(
      `INSERT INTO webhook_delivery_attempts (delivery_id, endpoint_id, event_id, attempt, started_at, duration_ms, status_code, error, delivered)
       VALUES ($1, $2, $3, 1, now(), 5, 500, NULL, false)`,
      [claimed[1]!.id, endpointId, claimed[1]!.event.id],
    );
    const count = async () =>
      (await h.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM webhook_delivery_attempts WHERE endpoint_id = $1', [endpointId])).rows[0]!.n;
    expect(await count()).toBe(2);
    expect(await deleteEndpoint(h.pool, tenant, endpointId)).toBe(true);
    expect(await count()).toBe(0);
    const deliveries = await h.pool.query('SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1', [endpointId]);
    expect(deliveries.rows[0]).toEqual({ n: 0 });
    // A success answered after the deletion records nothing (its delivery is gone), and fails nothing.
    await recordDelivered(h.pool, [success(claimed[1]!)]);
    expect(await count()).toBe(0);
  });

  it("a delivery's event always exists without a key to it: a redelivery and a cursor's record take it from events, which refuse deletion", async () => {
    const { tenant, endpointId } = await tenantWithEndpoint('wds-event');
    const other = await tenantWithEndpoint('wds-event-other');
    const eventId = await depositEvent(tenant);
    const otherEvent = await depositEvent(other.tenant);
    expect(await requestRedelivery(h.pool, tenant, endpointId, otherEvent)).toBe('event');
    expect(await requestRedelivery(h.pool, tenant, endpointId, 'evt_nosuchevent')).toBe('event');
    expect(await requestRedelivery(h.pool, tenant, endpointId, eventId)).toMatchObject({ deliveryId: expect.any(Number) });
    const orphans = await h.pool.query(
      'SELECT count(*)::int AS n FROM webhook_deliveries d WHERE d.tenant = ANY ($1) AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = d.event_id AND e.tenant = d.tenant)',
      [[tenant, other.tenant]],
    );
    expect(orphans.rows[0]).toEqual({ n: 0 });
    // The cursor's batch holds the events it read: its record writes those, and no other tenant's.
    const { batches } = await take(h.pool, tenant, 'owner-a');
    expect(batches.flatMap((b) => b.events.map((e) => e.event.id))).toEqual([eventId]);
    expect(
      await takeWork(h.pool, { owner: 'owner-a', leaseMs: 60_000, perEndpointMax: 4, max: 0, batchEventsMax: 64 }, { delivered: [], batches: [finish(batches[0]!)] }),
    ).toEqual({ retry: [], batches: [] });
    const made = await h.pool.query<{ event_id: string; requested: boolean }>('SELECT event_id, requested FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY requested', [endpointId]);
    expect(made.rows).toEqual([
      { event_id: eventId, requested: false },
      { event_id: eventId, requested: true },
    ]);
    await expect(h.pool.query('DELETE FROM events WHERE id = $1', [eventId])).rejects.toThrow(/append-only/);
  });
  it("a take is one statement: the events after the endpoint's cursor as one batch, its lease and slots on the endpoint row; nobody else takes them, and the retry lane counts the slots busy", async () => {
    const { tenant, endpointId, secret } = await tenantWithEndpoint('wds-take');
    const eventIds = [await depositEvent(tenant), await depositEvent(tenant), await depositEvent(tenant)];
    const { pool, statements } = counted();

    const taken = await take(pool, tenant, 'owner-a');
    expect(statements()).toBe(1);
    expect(taken.retry).toEqual([]);
    expect(taken.batches).toHaveLength(1);
    const [batch] = taken.batches as [CursorBatch];
    expect(batch).toMatchObject({ endpointId, tenant, url: 'http://127.0.0.1:9/hooks', secrets: [secret], slots: 4 });
    expect(batch.events.map((e) => e.event.id)).toEqual(eventIds);
    const stored = await h.pool.query('SELECT seq, id, tenant, type, object_type, object_id, object_sequence, data, created_at FROM events WHERE id = $1', [eventIds[0]]);
    expect(batch.events[0]!.event).toEqual(stored.rows[0]);
    expect(batch.to).toEqual(batch.events[2]!.position);
    expect(await cursorOf(endpointId)).toEqual({ owner: 'owner-a', slots: 4, live: true });

    // Leased: another process takes nothing of it, and the retry lane finds every slot busy.
    expect(await take(h.pool, tenant, 'owner-b')).toEqual({ retry: [], batches: [] });
    await requestRedelivery(h.pool, tenant, endpointId, eventIds[0]!);
    expect(await claim(h.pool, tenant, 'owner-b', 4)).toEqual([]);
    expect(await claim(h.pool, tenant, 'owner-b', 5)).toHaveLength(1);
  });

  it("the next take records a finished batch in its statement: each event's delivery and attempt, the cursor moved past them, the slots free for the same take", async () => {
    const { tenant, endpointId } = await tenantWithEndpoint('wds-record');
    const first = [await depositEvent(tenant), await depositEvent(tenant)];
    const [batch] = (await take(h.pool, tenant, 'owner-a', { perEndpointMax: 2 })).batches as [CursorBatch];
    const later = await depositEvent(tenant);
    const { pool, statements } = counted();

    const next = await take(pool, tenant, 'owner-a', { perEndpointMax: 2, carried: { delivered: [], batches: [finish(batch)] } });
    expect(statements()).toBe(1);
    expect(next.batches.map((b) => b.events.map((e) => e.event.id))).toEqual([[later]]);
    expect(next.batches[0]!.from).toEqual(batch.to);
    const rows = await h.pool.query('SELECT event_id, state, attempts, lease_owner, finished_at IS NOT NULL AS finished FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id', [endpointId]);
    expect(rows.rows).toEqual(first.map((id) => ({ event_id: id, state: 'delivered', attempts: 1, lease_owner: null, finished: true })));
    const attempts = await h.pool.query('SELECT event_id, attempt, status_code, delivered FROM webhook_delivery_attempts WHERE endpoint_id = $1 ORDER BY id', [endpointId]);
    expect(attempts.rows).toEqual(first.map((id) => ({ event_id: id, attempt: 1, status_code: 204, delivered: true })));
    expect(await eventsBehindCursor(h.pool, endpointId)).toBe(1);
    expect(await cursorOf(endpointId)).toEqual({ owner: 'owner-a', slots: 2, live: true });

    // All or none: an attempt the ledger refuses fails the take, nothing is recorded, the cursor stays.
    const refused = { ...finish(next.batches[0]!), attempts: [{ ...sent(later, new Date()), durationMs: -1 }] };
    await expect(take(h.pool, tenant, 'owner-a', { carried: { delivered: [], batches: [refused] } })).rejects.toThrow(/duration_ms/);
    expect(await eventsBehindCursor(h.pool, endpointId)).toBe(1);
    expect(await deliveryCounts(h.pool, endpointId)).toMatchObject({ delivered: 2, attempts: 2 });
  });

  it('a batch whose cursor moved meanwhile records nothing and ends its lease; a failure in a batch leaves a retry row and starts the run of failures', async () => {
    const { tenant, endpointId } = await tenantWithEndpoint('wds-moved');
    const failures = { disableAfterFailingMs: 3_600_000, renderEndpoint: webhookEndpointToWire };
    await depositEvent(tenant);
    const [stale] = (await take(h.pool, tenant, 'owner-a')).batches as [CursorBatch];
    // Disabled and enabled again: the cursor moves to the current position under the batch.
    await updateEndpoint(h.pool, tenant, endpointId, { disabled: true });
    await updateEndpoint(h.pool, tenant, endpointId, { disabled: false });
    expect(await recordCursorBatches(h.pool, 'owner-a', [finish(stale)], failures)).toEqual({ recorded: [], disabled: [] });
    expect(await deliveryCounts(h.pool, endpointId)).toEqual({ pending: 0, delivered: 0, failed: 0, attempts: 0 });
    expect(await cursorOf(endpointId)).toEqual({ owner: null, slots: 0, live: null });

    const [ok, bad] = [await depositEvent(tenant), await depositEvent(tenant)];
    const [batch] = (await take(h.pool, tenant, 'owner-a')).batches as [CursorBatch];
    expect(batch.events.map((e) => e.event.id)).toEqual([ok, bad]);
    const t0 = new Date(Date.now() - 1_000);
    const failedAt = new Date(t0.getTime() + 10);
    const retryAt = new Date(Date.now() + 3_600_000);
    const recorded = await recordCursorBatches(h.pool, 'owner-a', [{ ...finish(batch), attempts: [sent(ok, t0), sent(bad, failedAt, 500, retryAt)] }], failures);
    expect(recorded).toEqual({ recorded: [endpointId], disabled: [] });
    const rows = await h.pool.query('SELECT event_id, state, attempts, next_attempt_at FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id', [endpointId]);
    expect(rows.rows).toEqual([
      { event_id: ok, state: 'delivered', attempts: 1, next_attempt_at: expect.any(Date) },
      { event_id: bad, state: 'pending', attempts: 1, next_attempt_at: retryAt },
    ]);
    const endpoint = await h.pool.query('SELECT failing_since, cursor_owner FROM webhook_endpoints WHERE id = $1', [endpointId]);
    expect(endpoint.rows[0]).toEqual({ failing_since: failedAt, cursor_owner: null });
    expect(await eventsBehindCursor(h.pool, endpointId)).toBe(0);
    // A take never carries a batch with a failure: that is recordCursorBatches' (with the endpoint's rule).
    await expect(take(h.pool, tenant, 'owner-a', { carried: { delivered: [], batches: [{ ...finish(batch), attempts: [sent(bad, failedAt, 500, retryAt)] }] } })).rejects.toThrow(
      /recordCursorBatches/,
    );
  });

  it("a cursor's reads go through events_by_tenant_xact: the tenant's rows after the cursor, not the table", async () => {
    const { tenant } = await tenantWithEndpoint('wds-plan');
    await depositEvent(tenant);
    const client = await h.pool.connect();
    try {
      const plan = await client.query(
        `EXPLAIN (FORMAT JSON) SELECT ev.xact_id, ev.seq FROM events ev
          WHERE ev.tenant = $1 AND ev.xact_id IS NOT NULL AND (ev.xact_id, ev.seq) > ('1'::xid8, 0::bigint)
            AND ev.xact_id < pg_snapshot_xmin(pg_current_snapshot())
          ORDER BY ev.xact_id, ev.seq LIMIT 64`,
        [tenant],
      );
      const text = JSON.stringify(plan.rows[0]['QUERY PLAN']);
      expect(text).toContain('events_by_tenant_xact');
      expect(text).not.toContain('"Sort"');
    } finally {
      client.release();
    }
  });
});
