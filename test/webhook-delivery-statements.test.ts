import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { deposit } from '../src/ledger/accounts.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import { claimDeliveries, createEndpoint, deleteEndpoint, recordDelivered, requestRedelivery, rotateSecret, type ClaimedDelivery, type DeliveredAttempt } from '../src/ledger/webhook-endpoints.js';
import { newTenant, openAccount, useHarness } from './support/harness.js';

/**
 * The deliverer's two statements (docs/webhook-endpoints.md, Where deliveries run): a claim that
 * returns everything an attempt needs, and a success recorded in one statement. The deliverer's
 * behaviour end to end (retries, 410, rotation, SIGKILL) is webhook-delivery.test.ts.
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

/** A deposit's deposit.credited event (the fan-out makes its delivery in the same transaction); its id. */
async function depositEvent(tenant: string): Promise<string> {
  const made = await deposit(h.pool, tenant, 'wh', 100, `wh-${randomBytes(8).toString('hex')}`);
  const { rows } = await h.pool.query<{ id: string }>('SELECT id FROM events WHERE tenant = $1 AND object_id = $2', [tenant, `dep_${made.transferId}`]);
  return rows[0]!.id;
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
    const eventId = await depositEvent(tenant);
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
    await depositEvent(tenant);
    const [next] = await claim(h.pool, tenant, 'owner-b');
    expect(next!.secrets).toEqual([rotated.secret]);
  });

  it("a claim counts every process's live leases against the endpoint's bound", async () => {
    const { tenant } = await tenantWithEndpoint('wds-bound');
    for (let i = 0; i < 3; i += 1) await depositEvent(tenant);
    expect(await claim(h.pool, tenant, 'owner-a', 2)).toHaveLength(2);
    // Both slots are held (by owner-a): owner-b gets none, though a delivery is due.
    expect(await claim(h.pool, tenant, 'owner-b', 2)).toEqual([]);
    expect(await claim(h.pool, tenant, 'owner-b', 3)).toHaveLength(1);
  });

  it('successes are recorded in one statement: each attempt with its delivery delivered; a run of failures ends, a healthy endpoint row is not written', async () => {
    const { tenant, endpointId } = await tenantWithEndpoint('wds-success');
    await depositEvent(tenant);
    await depositEvent(tenant);
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
    await depositEvent(tenant);
    await depositEvent(tenant);
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
    for (let i = 0; i < 3; i += 1) await depositEvent(tenant);
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
    await depositEvent(tenant);
    await depositEvent(tenant);
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

  it("a delivery's event always exists without a key to it: the fan-out and a redelivery take it from events, which refuse deletion", async () => {
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
    const made = await h.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM webhook_deliveries WHERE endpoint_id = $1', [endpointId]);
    expect(made.rows[0]!.n).toBe(2);
    await expect(h.pool.query('DELETE FROM events WHERE id = $1', [eventId])).rejects.toThrow(/append-only/);
  });
});
