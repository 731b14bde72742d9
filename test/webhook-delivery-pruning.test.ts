import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { deposit } from '../src/ledger/accounts.js';
import { createEndpoint, deliveryCounts, eventsBehindCursor, listAttempts, requestRedelivery } from '../src/ledger/webhook-endpoints.js';
import { WebhookDeliverer } from '../src/outbound/deliverer.js';
import { DeliveryPruner, type DeliveryRetention, type PruneRun } from '../src/outbound/delivery-pruner.js';
import { deliveryRetentionFromConfig } from '../src/runtime/webhook-settings.js';
import { renderEvent } from '../src/service/events.js';
import { webhookEndpointToWire } from '../src/service/webhook-endpoints.js';
import { fastDelivererSettings } from './support/deliverer-settings.js';
import { newKey, newTenant, openAccount, useScratchLedger, waitFor } from './support/harness.js';
import { startReceiver, type Receiver } from './support/receivers.js';

/**
 * Retention of webhook deliveries: finished ones (delivered, or failed for good) older than the
 * retention are deleted with their attempts, in bounded batches; pending ones and events stay.
 * A ledger of its own: the pruner works across every tenant, and the ages below are set by hand.
 */
const h = useScratchLedger();

const day = 24 * 3_600_000;
const retention: DeliveryRetention = { deliveryRetentionMs: 30 * day, pruneIntervalMs: 50, pruneBatchSize: 2, pruneBatchesPerRunMax: 2 };

const running: Array<{ stop(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((r) => r.stop()));
});

async function receiver(answer?: Parameters<typeof startReceiver>[0]): Promise<Receiver> {
  const r = await startReceiver(answer);
  running.push({ stop: () => r.close() });
  return r;
}

/** A tenant with an endpoint at `url` subscribed to everything, and `count` deposits (events), each its delivery. */
async function tenantWithDeliveries(label: string, url: string, count: number): Promise<{ tenant: string; endpointId: string; eventIds: string[] }> {
  const tenant = newTenant(label);
  await openAccount(h.pool, tenant, 'wh');
  const { endpoint } = await createEndpoint(h.pool, { tenant, url, enabledEvents: ['*'], description: null }, 16);
  for (let i = 0; i < count; i += 1) await deposit(h.pool, tenant, 'wh', 100, newKey('prune'));
  const events = await h.pool.query<{ id: string }>('SELECT id FROM events WHERE tenant = $1 ORDER BY seq', [tenant]);
  expect(events.rows).toHaveLength(count);
  return { tenant, endpointId: endpoint.id, eventIds: events.rows.map((row) => row.id) };
}

/** Delivers every event of the tenant, and every pending delivery, through a real deliverer (a 2xx, or a 410 that fails them). */
async function deliverAll(tenant: string, endpointId: string): Promise<void> {
  const deliverer = new WebhookDeliverer({
    pool: h.pool,
    settings: { ...fastDelivererSettings, perEndpointConcurrency: 4 },
    render: (row) => renderEvent(row),
    renderEndpoint: webhookEndpointToWire,
    onlyTenants: [tenant],
    log: () => {},
  });
  deliverer.start();
  try {
    await waitFor(async () => (await deliveryCounts(h.pool, endpointId)).pending === 0 && (await eventsBehindCursor(h.pool, endpointId)) === 0, {
      what: 'every delivery finished',
    });
  } finally {
    await deliverer.stop();
  }
}

/** Moves a delivery's times back, as if it had been made and finished `ageMs` ago. */
async function age(deliveryIds: number[], ageMs: number): Promise<void> {
  await h.pool.query(
    `UPDATE webhook_deliveries SET created_at = now() - $2 * interval '1 millisecond',
            finished_at = CASE WHEN finished_at IS NULL THEN NULL ELSE now() - $2 * interval '1 millisecond' END
      WHERE id = ANY($1)`,
    [deliveryIds, ageMs],
  );
}

async function deliveriesOf(endpointId: string): Promise<Array<{ id: number; state: string; requested: boolean }>> {
  const { rows } = await h.pool.query<{ id: number; state: string; requested: boolean }>(
    'SELECT id, state, requested FROM webhook_deliveries WHERE endpoint_id = $1 ORDER BY id',
    [endpointId],
  );
  return rows;
}

async function attemptCount(deliveryIds: number[]): Promise<number> {
  const { rows } = await h.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM webhook_delivery_attempts WHERE delivery_id = ANY($1)', [deliveryIds]);
  return rows[0]!.n;
}

describe('retention of webhook deliveries', () => {
  it('finished deliveries past the retention go with their attempts, in bounded batches; recent and pending ones and every event stay', async () => {
    // One endpoint answering 500 twice, then 200: each delivery of the first two has more than one attempt.
    const rx = await receiver((request) => ({ status: request.n <= 2 ? 500 : 200 }));
    const delivered = await tenantWithDeliveries('prune-delivered', rx.url, 6);
    await deliverAll(delivered.tenant, delivered.endpointId);
    // One that failed for good (a 410), and one still pending (asked for again; no deliverer runs for its tenant).
    const gone = await receiver(() => ({ status: 410 }));
    const failed = await tenantWithDeliveries('prune-failed', gone.url, 1);
    await deliverAll(failed.tenant, failed.endpointId);
    const pending = await tenantWithDeliveries('prune-pending', rx.url, 1);
    // Its event's first attempt would come from its cursor; a redelivery asked for is a row at once.
    await requestRedelivery(h.pool, pending.tenant, pending.endpointId, pending.eventIds[0]!);

    const deliveredRows = await deliveriesOf(delivered.endpointId);
    expect(deliveredRows.map((row) => row.state)).toEqual(Array(6).fill('delivered'));
    const failedRows = await deliveriesOf(failed.endpointId);
    expect(failedRows.map((row) => row.state)).toEqual(['failed']);
    const pendingRows = await deliveriesOf(pending.endpointId);
    expect(pendingRows.map((row) => row.state)).toEqual(['pending']);

    const oldDelivered = deliveredRows.slice(0, 5).map((row) => row.id);
    const recentDelivered = deliveredRows.slice(5).map((row) => row.id);
    const oldFailed = failedRows.map((row) => row.id);
    const oldPending = pendingRows.map((row) => row.id);
    await age([...oldDelivered, ...oldFailed, ...oldPending], 31 * day);
    // Just inside the retention: kept.
    await age(recentDelivered, 29 * day);
    const doomed = [...oldDelivered, ...oldFailed];
    const doomedAttempts = await attemptCount(doomed);
    expect(doomedAttempts).toBeGreaterThan(doomed.length);
    const eventsBefore = (await h.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n;

    const pruner = new DeliveryPruner(h.pool, retention, { log: () => {} });
    // 6 deliveries are due; a run makes at most 2 statements of 2: 4, then the other 2.
    const first = await pruner.runOnce();
    expect(first).toEqual({ deliveries: 4, attempts: expect.any(Number), batches: 2, more: true });
    const second = await pruner.runOnce();
    expect(second).toMatchObject({ deliveries: 2, batches: 2, more: false });
    expect(first.attempts + second.attempts).toBe(doomedAttempts);
    const third = await pruner.runOnce();
    expect(third).toEqual({ deliveries: 0, attempts: 0, batches: 1, more: false });

    const left = await h.pool.query<{ id: number }>('SELECT id FROM webhook_deliveries WHERE id = ANY($1) ORDER BY id', [[...doomed, ...recentDelivered, ...oldPending]]);
    expect(left.rows.map((row) => row.id)).toEqual([...recentDelivered, ...oldPending].sort((a, b) => a - b));
    expect(await attemptCount(doomed)).toBe(0);
    expect(await attemptCount(recentDelivered)).toBeGreaterThan(0);
    // The endpoint's attempts list shows what is kept.
    const listed = (await listAttempts(h.pool, delivered.tenant, delivered.endpointId, 100))!;
    expect(new Set(listed.map((attempt) => attempt.deliveryId))).toEqual(new Set(recentDelivered));
    // Events are append-only and kept: not one is gone.
    expect((await h.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM events')).rows[0]!.n).toBe(eventsBefore);
    // A pruned delivery's event can still be sent again on request: a new delivery.
    const again = await requestRedelivery(h.pool, delivered.tenant, delivered.endpointId, delivered.eventIds[0]!);
    expect(again).toMatchObject({ deliveryId: expect.any(Number) });
  });

  it('the pruner runs by itself every pruneIntervalMs until stopped', async () => {
    const rx = await receiver();
    const { tenant, endpointId } = await tenantWithDeliveries('prune-loop', rx.url, 3);
    await deliverAll(tenant, endpointId);
    const ids = (await deliveriesOf(endpointId)).map((row) => row.id);
    const runs: PruneRun[] = [];
    const pruner = new DeliveryPruner(h.pool, retention, { log: () => {}, onRun: (run) => runs.push(run) });
    pruner.start();
    running.push(pruner);
    // Its first runs find nothing due; the rows age past the retention while it runs, and a later run takes them.
    await waitFor(async () => runs.length >= 1, { what: 'a first run' });
    expect((await deliveriesOf(endpointId)).map((row) => row.id)).toEqual(ids);
    await age(ids, 31 * day);
    await waitFor(async () => (await deliveriesOf(endpointId)).length === 0, { what: 'the aged deliveries pruned by a later run' });
    expect(runs.some((run) => run.deliveries > 0)).toBe(true);
  });

  it('the settings: 30 days and a run a minute by default, 1 hour at least, 1,000 per statement and 20 statements a run', () => {
    expect(deliveryRetentionFromConfig(loadConfig({}))).toEqual({ deliveryRetentionMs: 30 * day, pruneIntervalMs: 60_000, pruneBatchSize: 1_000, pruneBatchesPerRunMax: 20 });
    expect(deliveryRetentionFromConfig(loadConfig({ WEBHOOK_DELIVERY_RETENTION_MS: String(7 * day) })).deliveryRetentionMs).toBe(7 * day);
    expect(() => loadConfig({ WEBHOOK_DELIVERY_RETENTION_MS: '60000' })).toThrow(/WEBHOOK_DELIVERY_RETENTION_MS/);
    expect(() => new DeliveryPruner(h.pool, { ...retention, pruneBatchSize: 0 })).toThrow(/pruneBatchSize must be a positive integer/);
  });

  it('a batch reads the oldest finished rows through webhook_deliveries_finished: its own rows, not the table', async () => {
    const rx = await receiver();
    const { tenant, endpointId, eventIds } = await tenantWithDeliveries('prune-plan', rx.url, 1);
    const client = await h.pool.connect();
    try {
      // 20,000 recent deliveries (half finished, half pending) and 5 past the retention; rolled back after.
      await client.query('BEGIN');
      await client.query(
        `INSERT INTO webhook_deliveries (endpoint_id, event_id, tenant, requested, state, finished_at)
         SELECT $1, $2, $3, true, CASE WHEN g % 2 = 0 THEN 'delivered' ELSE 'pending' END,
                CASE WHEN g % 2 = 0 THEN now() - (g % 1000) * interval '1 minute' END
           FROM generate_series(1, 20000) AS g`,
        [endpointId, eventIds[0], tenant],
      );
      await client.query(
        `INSERT INTO webhook_deliveries (endpoint_id, event_id, tenant, requested, state, finished_at)
         SELECT $1, $2, $3, true, 'failed', now() - interval '40 days' FROM generate_series(1, 5)`,
        [endpointId, eventIds[0], tenant],
      );
      await client.query('ANALYZE webhook_deliveries');
      const explained = await client.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode }> }>(
        `EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM webhook_deliveries WHERE finished_at < now() - $1 * interval '1 millisecond'
          ORDER BY finished_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`,
        [retention.deliveryRetentionMs, retention.pruneBatchSize],
      );
      const scans = nodesOf(explained.rows[0]!['QUERY PLAN'][0]!.Plan).filter((node) => /Scan/.test(node['Node Type']));
      expect(scans.map((node) => node['Index Name'] ?? node['Node Type'])).toEqual(['webhook_deliveries_finished']);
      // The batch's own rows: LIMIT 2 reads 2 of the 5 due, none of the 20,000 others.
      expect(scans[0]!['Actual Rows']).toBe(retention.pruneBatchSize);
      expect(scans[0]!['Rows Removed by Filter'] ?? 0).toBe(0);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });
});

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Actual Rows'?: number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

function nodesOf(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(nodesOf)];
}
