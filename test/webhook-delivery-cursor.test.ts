import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { LedgerPool } from '../src/ledger/pool.js';
import { createEndpoint, deliveryCounts, eventsBehindCursor, listAttempts, newEventId, updateEndpoint } from '../src/ledger/webhook-endpoints.js';
import { WebhookDeliverer, type DelivererSettings } from '../src/outbound/deliverer.js';
import { webhookEndpointToWire } from '../src/service/webhook-endpoints.js';
import { newTenant, useHarness, waitFor } from './support/harness.js';
import { gate, type Receiver } from './support/receivers.js';
import { fastDelivererSettings, stoppedAfterEach } from './support/deliverer-settings.js';

/**
 * First attempts read from the events log by each endpoint's cursor (docs/webhook-endpoints.md, How
 * a delivery is made): what the cursor must never do (skip an event whose transaction commits late,
 * let two processes send one endpoint's events at once, lose a batch whose record never came), and
 * what it must keep (an endpoint disabled and enabled again gets nothing written meanwhile).
 */
const h = useHarness();

const fast = fastDelivererSettings;

const { track, receiver } = stoppedAfterEach();

function startDeliverer(tenant: string, options: { settings?: Partial<DelivererSettings>; pool?: LedgerPool; owner?: string; log?: (line: string) => void } = {}): WebhookDeliverer {
  const deliverer = new WebhookDeliverer({
    pool: options.pool ?? h.pool,
    settings: { ...fast, ...options.settings },
    // The stored event as it is: these events are written here, not by the ledger's writers.
    render: (row) => ({ id: row.id, type: row.type, data: row.data }),
    renderEndpoint: webhookEndpointToWire,
    onlyTenants: [tenant],
    ...(options.owner ? { owner: options.owner } : {}),
    log: options.log ?? (() => {}),
  });
  deliverer.start();
  return track(deliverer);
}

/**
 * Inserts an event of the tenant through `db` (a pool, or a client inside an open transaction); its
 * id. A `webhook_endpoint.disabled` event about an endpoint id made up here: the one kind of event
 * whose object need not exist (the ledger's invariants allow it, as such an event outlives its
 * endpoint), so that a test can write one inside a transaction it holds open without writing money.
 */
async function writeEvent(db: Pick<LedgerPool, 'query'>, tenant: string): Promise<string> {
  const id = newEventId();
  const objectId = `we_${randomBytes(12).toString('hex')}`;
  await db.query('INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data) VALUES ($1, $2, $3, $4, $5, 1, $6)', [
    id,
    tenant,
    'webhook_endpoint.disabled',
    'webhook_endpoint',
    objectId,
    JSON.stringify({ object: { id: objectId } }),
  ]);
  return id;
}

/** The pool, counting the deliverer's takes through it. */
function countingTakes(): { pool: LedgerPool; takes: () => number } {
  let takes = 0;
  const pool = {
    query: (...args: unknown[]) => {
      if (String(args[0]).includes('webhook_deliveries_take')) takes += 1;
      return (h.pool.query as (...a: unknown[]) => unknown)(...args);
    },
    connect: () => h.pool.connect(),
  } as unknown as LedgerPool;
  return { pool, takes: () => takes };
}

const ids = (rx: Receiver) => rx.received.map((r) => String(r.headers['webhook-id']));

describe('webhook deliveries by cursor', () => {
  it('an event whose transaction commits after a later-seq event is still delivered: the cursor waits for the older transaction', async () => {
    const tenant = newTenant('wc-late');
    const rx = await receiver();
    const { endpoint } = await createEndpoint(h.pool, { tenant, url: rx.url, enabledEvents: ['*'], description: null }, 16);
    const { pool, takes } = countingTakes();
    startDeliverer(tenant, { pool });
    const open = await h.pool.connect();
    let early: string;
    let late: string;
    try {
      await open.query('BEGIN');
      // Written first (the smaller seq), committed last.
      early = await writeEvent(open, tenant);
      late = await writeEvent(h.pool, tenant);
      const seqs = await h.pool.query<{ seq: string }>('SELECT seq FROM events WHERE id = $1', [late]);
      const earlySeq = await open.query<{ seq: string }>('SELECT seq FROM events WHERE id = $1', [early]);
      expect(Number(earlySeq.rows[0]!.seq)).toBeLessThan(Number(seqs.rows[0]!.seq));
      // The later event is committed and visible, but its transaction is above the open one's: the
      // deliverer takes again and again and sends nothing.
      const after = takes();
      await waitFor(async () => takes() >= after + 5, { what: 'five takes while the older transaction is open' });
      expect(rx.received).toHaveLength(0);
      expect(await eventsBehindCursor(h.pool, endpoint.id)).toBe(1);
      await open.query('COMMIT');
    } catch (error) {
      await open.query('ROLLBACK').catch(() => undefined);
      throw error;
    } finally {
      open.release();
    }
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).delivered === 2, { what: 'both events delivered' });
    expect(ids(rx)).toEqual([early, late]);
    expect(await eventsBehindCursor(h.pool, endpoint.id)).toBe(0);
  });

  it('two deliverers on one endpoint, first attempts failing now and then: never more in flight than the bound, never one event sent by both', async () => {
    const tenant = newTenant('wc-two');
    let maxInFlight = 0;
    const failedOnce = new Set<string>();
    // Every fourth event fails its first attempt (the retry lane then has rows beside the cursor's batches); each answer takes 10 ms.
    const busy: Receiver = await receiver((request) => {
      maxInFlight = Math.max(maxInFlight, busy.inFlight());
      const id = String(request.headers['webhook-id']);
      const failing = parseInt(id.slice(-1), 16) % 4 === 0 && !failedOnce.has(id);
      if (failing) failedOnce.add(id);
      return { status: failing ? 503 : 200, hold: new Promise((done) => setTimeout(done, 10)) };
    });
    const { endpoint } = await createEndpoint(h.pool, { tenant, url: busy.url, enabledEvents: ['*'], description: null }, 16);
    startDeliverer(tenant, { owner: 'deliverer-a' });
    startDeliverer(tenant, { owner: 'deliverer-b' });
    {
      const written: string[] = [];
      for (let i = 0; i < 40; i += 1) written.push(await writeEvent(h.pool, tenant));
      await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).delivered === 40, { what: 'all 40 delivered', timeoutMs: 60_000 });
      // Each event was sent once, and once more only after its first attempt failed: no batch was sent by both.
      const perEvent = new Map<string, number>();
      for (const id of ids(busy)) perEvent.set(id, (perEvent.get(id) ?? 0) + 1);
      expect([...perEvent.keys()].sort()).toEqual([...written].sort());
      for (const id of written) expect(perEvent.get(id)).toBe(failedOnce.has(id) ? 2 : 1);
      expect(failedOnce.size).toBeGreaterThan(0);
      expect(maxInFlight).toBeLessThanOrEqual(fast.perEndpointConcurrency);
      expect(maxInFlight).toBeGreaterThan(0);
      expect(await deliveryCounts(h.pool, endpoint.id)).toEqual({ pending: 0, delivered: 40, failed: 0, attempts: 40 + failedOnce.size });
    }
  });

  it('a batch whose record never came (its process lost the database after sending) is sent again once the lease expires: nothing lost', async () => {
    const tenant = newTenant('wc-lost');
    const rx = await receiver();
    const { endpoint } = await createEndpoint(h.pool, { tenant, url: rx.url, enabledEvents: ['*'], description: null }, 16);
    const written: string[] = [];
    for (let i = 0; i < 5; i += 1) written.push(await writeEvent(h.pool, tenant));
    // The first deliverer's database goes away after its first take: it sends the batch and can record nothing.
    let takes = 0;
    const failing = {
      query: (...args: unknown[]) => {
        if (String(args[0]).includes('webhook_deliveries_take') && (takes += 1) > 1) return Promise.reject(new Error('connection lost'));
        return (h.pool.query as (...a: unknown[]) => unknown)(...args);
      },
      connect: () => Promise.reject(new Error('connection lost')),
    } as unknown as LedgerPool;
    const lines: string[] = [];
    const settings = { leaseMs: 3_000, door: { ...fast.door, connectTimeoutMs: 1_000, responseTimeoutMs: 1_500 } };
    startDeliverer(tenant, { pool: failing, settings, log: (line) => lines.push(line) });
    await waitFor(async () => lines.some((line) => line.includes('recording it failed')), { what: 'the batch sent and its record failed' });
    // The batch: the events below the horizon at its take (another transaction of the cluster may hold some back), in order.
    const firstSent = ids(rx);
    expect(firstSent.length).toBeGreaterThan(0);
    expect(firstSent).toEqual(written.slice(0, firstSent.length));
    expect(await deliveryCounts(h.pool, endpoint.id)).toEqual({ pending: 0, delivered: 0, failed: 0, attempts: 0 });
    expect(await eventsBehindCursor(h.pool, endpoint.id)).toBe(5);
    startDeliverer(tenant, { settings });
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).delivered === 5, { what: 'the batch sent again and recorded' });
    // Not before the first process's lease ran out.
    expect(rx.received[firstSent.length]!.at - rx.received[0]!.at).toBeGreaterThanOrEqual(settings.leaseMs - 1_000);
    expect(ids(rx)).toEqual([...firstSent, ...written]);
    expect(await eventsBehindCursor(h.pool, endpoint.id)).toBe(0);
  });

  it('an endpoint disabled and enabled again gets nothing written while it was disabled, and everything after', async () => {
    const tenant = newTenant('wc-reenable');
    const rx = await receiver();
    const { endpoint } = await createEndpoint(h.pool, { tenant, url: rx.url, enabledEvents: ['*'], description: null }, 16);
    startDeliverer(tenant);
    const before = await writeEvent(h.pool, tenant);
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).delivered === 1, { what: 'the first event' });
    await updateEndpoint(h.pool, tenant, endpoint.id, { disabled: true });
    const during = [await writeEvent(h.pool, tenant), await writeEvent(h.pool, tenant)];
    expect(during).toHaveLength(2);
    await updateEndpoint(h.pool, tenant, endpoint.id, { disabled: false });
    const after = await writeEvent(h.pool, tenant);
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).delivered === 2, { what: 'the event after enabling' });
    expect(ids(rx)).toEqual([before, after]);
    // Enabling an endpoint that is enabled moves nothing: an event written now is its.
    await updateEndpoint(h.pool, tenant, endpoint.id, { disabled: false });
    const last = await writeEvent(h.pool, tenant);
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).delivered === 3, { what: 'the event after a second enable' });
    expect(ids(rx)).toEqual([before, after, last]);
    expect(await deliveryCounts(h.pool, endpoint.id)).toEqual({ pending: 0, delivered: 3, failed: 0, attempts: 3 });
  });

  it('a first attempt that fails becomes a retry row: one delivery, its attempts numbered on from 1, the cursor past it', async () => {
    const tenant = newTenant('wc-retry');
    const rx = await receiver((request) => ({ status: request.n <= 2 ? 500 : 204 }));
    const { endpoint } = await createEndpoint(h.pool, { tenant, url: rx.url, enabledEvents: ['*'], description: null }, 16);
    startDeliverer(tenant);
    const id = await writeEvent(h.pool, tenant);
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).delivered === 1, { what: 'the delivery after two failures' });
    expect(await deliveryCounts(h.pool, endpoint.id)).toEqual({ pending: 0, delivered: 1, failed: 0, attempts: 3 });
    const attempts = (await listAttempts(h.pool, tenant, endpoint.id, 10))!;
    expect(attempts.map((a) => [a.eventId, a.attempt, a.statusCode])).toEqual([
      [id, 3, 204],
      [id, 2, 500],
      [id, 1, 500],
    ]);
    expect(new Set(attempts.map((a) => a.deliveryId)).size).toBe(1);
    expect(ids(rx)).toEqual([id, id, id]);
    const endpointRow = await h.pool.query('SELECT failing_since FROM webhook_endpoints WHERE id = $1', [endpoint.id]);
    expect(endpointRow.rows[0]).toEqual({ failing_since: null });
  });

  it('a slow batch holds only its slots and a second endpoint of the tenant is served meanwhile', async () => {
    const tenant = newTenant('wc-slow');
    const release = gate();
    const slow = await receiver(() => ({ status: 200, hold: release.promise }));
    const quick = await receiver();
    const { endpoint: slowEndpoint } = await createEndpoint(h.pool, { tenant, url: slow.url, enabledEvents: ['*'], description: null }, 16);
    const { endpoint: quickEndpoint } = await createEndpoint(h.pool, { tenant, url: quick.url, enabledEvents: ['*'], description: null }, 16);
    // The held requests must outlast the test's waits on a slow machine: a send the deliverer gave
    // up on at its response timeout would be sent again and counted twice by the receiver.
    // The events are written before the deliverer starts, so that its first batch to each endpoint
    // has all six: one endpoint has one batch in flight at a time, and a batch taken after the first
    // event alone would hold one slot until it is answered (a CI run saw exactly that).
    for (let i = 0; i < 6; i += 1) await writeEvent(h.pool, tenant);
    startDeliverer(tenant, { settings: { leaseMs: 70_000, door: { ...fast.door, responseTimeoutMs: 60_000 } } });
    try {
      await waitFor(async () => (await deliveryCounts(h.pool, quickEndpoint.id)).delivered === 6, { what: 'the quick endpoint served' });
      // Its slots fill as the sends arrive, which on a busy machine may be after the quick endpoint was served.
      await waitFor(async () => slow.inFlight() === fast.perEndpointConcurrency, { what: `the slow endpoint holding ${fast.perEndpointConcurrency} requests` }).catch((error: Error) => {
        throw new Error(`${error.message}: ${slow.inFlight()} in flight, at most ${slow.mostInFlight()}, ${slow.received.length} received`);
      });
      expect(slow.mostInFlight()).toBe(fast.perEndpointConcurrency);
      expect((await deliveryCounts(h.pool, slowEndpoint.id)).delivered).toBe(0);
    } finally {
      release.open();
    }
    await waitFor(async () => (await deliveryCounts(h.pool, slowEndpoint.id)).delivered === 6, { what: 'the slow endpoint caught up' });
  });
});
