import { eventTypesOf } from '../../src/domain/events.js';
import { webhookEndpointLimits } from '../../src/domain/webhook-endpoints.js';
import { createEndpoint } from '../../src/ledger/webhook-endpoints.js';
import type { LedgerPool } from '../../src/ledger/pool.js';
import { ChargeTally, settleUnsettled } from '../lib/charging.js';
import { tenantFor, type BenchContext } from '../lib/context.js';
import { openPopulation } from '../lib/population.js';
import type { TemporalSession } from '../lib/session.js';
import { summariseLatencies, type LatencySummaryMs } from '../lib/stats.js';
import { LoopbackReceiver } from '../lib/webhook-receiver.js';
import { verifyScenario, type Verification } from '../lib/verify.js';
import { measureThroughputPoint, spreadPopulationSize, type ThroughputPoint } from './p1-throughput.js';

/**
 * How long, after a point's last charge, every event of it may take to reach the receiver before
 * the run says some were not delivered, milliseconds. The deliverer polls every 250 ms by default;
 * a backlog of a 128-caller point drains in seconds.
 */
export const deliveryDrainBudgetMs = 120_000;

/** What the one endpoint received of one point's events. */
export interface PointDeliveries {
  /** Charge events the point's charges wrote. */
  events: number;
  /** Of those, how many reached the receiver at least once. */
  delivered: number;
  /** Deliveries the receiver got again for an event it already had (at least once allows them). */
  duplicates: number;
  /** Event created_at (its ledger transaction's start) → the receiver had the whole request, ms. */
  lag: LatencySummaryMs;
}

export type WebhookThroughputPoint = ThroughputPoint & { deliveries: PointDeliveries };

export interface P1WebhookResult {
  points: WebhookThroughputPoint[];
  baselineActivityKind: 'local' | 'remote';
  /** The event types the endpoint is subscribed to: every charge event. */
  enabledEvents: string[];
  verification: Verification;
  /** Every event of every point delivered, each within the drain budget. */
  deliveryProblems: string[];
}

/**
 * P1 with one webhook endpoint: the same closed loop and bare-workflow baseline as P1, on a tenant
 * whose one endpoint is subscribed to every charge event and points at a loopback receiver (a
 * process of its own, answering 204 at once). The session's deliverer (the production one, running
 * beside the workers) sends them. After each point the scenario waits for every event of it to arrive, so the next point starts with no
 * backlog, and reports the delivery lag of that point's events.
 */
export async function runP1Webhook(
  ctx: BenchContext,
  session: TemporalSession,
  options: { concurrency: number[]; baselineLocalActivities: boolean },
): Promise<P1WebhookResult> {
  if (!session.options.webhookDelivery) throw new Error('P1-webhook needs a session whose workers run the webhook deliverer');
  const population = await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, 'p1-webhook'), ...spreadPopulationSize });
  const receiver = await LoopbackReceiver.start();
  try {
    const enabledEvents = eventTypesOf('charge');
    await createEndpoint(
      ctx.ledger,
      { tenant: population.tenant, url: receiver.url, enabledEvents, description: 'bench receiver on loopback' },
      webhookEndpointLimits.endpointsPerTenantMax,
    );
    const tally = new ChargeTally();
    const points: WebhookThroughputPoint[] = [];
    const deliveryProblems: string[] = [];
    for (const concurrency of options.concurrency) {
      const since = await databaseNow(ctx.ledger);
      await receiver.refresh();
      const duplicatesBefore = receiver.duplicates;
      const point = await measureThroughputPoint(ctx, session, population, tally, {
        label: `p1-webhook N=${concurrency}`,
        concurrency,
        baselineLocalActivities: options.baselineLocalActivities,
      });
      const deliveries = await pointDeliveries(ctx.ledger, receiver, population.tenant, since, duplicatesBefore);
      if (deliveries.delivered < deliveries.events) {
        deliveryProblems.push(`N=${concurrency}: ${deliveries.events - deliveries.delivered} of ${deliveries.events} charge events not delivered within ${deliveryDrainBudgetMs} ms`);
      }
      ctx.log(`p1-webhook N=${concurrency}: ${deliveries.delivered}/${deliveries.events} events delivered, lag p50 ${deliveries.lag.p50Ms.toFixed(0)} ms, p99 ${deliveries.lag.p99Ms.toFixed(0)} ms`);
      points.push({ ...point, deliveries });
    }
    await settleUnsettled(session.charges, population.tenant, tally);
    return {
      points,
      baselineActivityKind: options.baselineLocalActivities ? 'local' : 'remote',
      enabledEvents,
      verification: await verifyScenario(ctx.ledger, population.tenant, tally.succeeded),
      deliveryProblems,
    };
  } finally {
    await receiver.stop();
  }
}

/** The database's clock: events' created_at is stamped by it, so a point's events are those stamped after this. */
async function databaseNow(ledger: LedgerPool): Promise<Date> {
  const { rows } = await ledger.query<{ now: Date }>('SELECT clock_timestamp() AS now');
  return rows[0]!.now;
}

/**
 * Waits (up to deliveryDrainBudgetMs) until the receiver has every charge event of the tenant
 * stamped since `since`, then measures their lag (duplicates counted from `duplicatesBefore`). The
 * receiver and the database share one machine and one clock.
 */
async function pointDeliveries(ledger: LedgerPool, receiver: LoopbackReceiver, tenant: string, since: Date, duplicatesBefore: number): Promise<PointDeliveries> {
  const deadline = Date.now() + deliveryDrainBudgetMs;
  for (;;) {
    await receiver.refresh();
    const { rows } = await ledger.query<{ id: string; created_ms: number }>(
      `SELECT id, extract(epoch FROM created_at) * 1000 AS created_ms FROM events
        WHERE tenant = $1 AND object_type = 'charge' AND created_at >= $2`,
      [tenant, since],
    );
    const lags = rows.flatMap((row) => {
      const at = receiver.firstSeenMs.get(row.id);
      return at === undefined ? [] : [at - Number(row.created_ms)];
    });
    if (lags.length === rows.length || Date.now() >= deadline) {
      return { events: rows.length, delivered: lags.length, duplicates: receiver.duplicates - duplicatesBefore, lag: summariseLatencies(lags) };
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}
