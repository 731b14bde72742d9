import { ChargeTally, chargeBody, spreadChargeOperation, settleUnsettled } from '../lib/charging.js';
import { measured, tenantFor, type BenchContext, type PhaseFigure } from '../lib/context.js';
import { runBounded, runClosedLoop, runOpenLoop, type Operation } from '../lib/load.js';
import { openPopulation, spreadPicker, type Population } from '../lib/population.js';
import { callsBetween, readSettledServiceRequests, workflowTasksBetween } from '../lib/server-metrics.js';
import type { TemporalSession } from '../lib/session.js';
import { ratio } from '../lib/stats.js';
import { verifyScenario, type Verification } from '../lib/verify.js';
import { baselineOperation, spreadPopulationSize } from './p1-throughput.js';

export interface P5Result {
  idle: PhaseFigure;
  /**
   * The bare workflow of P1, one at a time, right after the idle charges on the same server: what
   * the idle p50 is compared with (an absolute figure depends on the machine; this ratio does not).
   */
  idleBare?: PhaseFigure;
  /** idle p50 ÷ the bare workflow's idle p50 (target ≤ 1.15). */
  idleP50OverBareP50?: number;
  /**
   * The bare workflow at half of its own P1 peak (Poisson, as the charges), and its p99 ÷ its idle
   * p50: how much of the half-load tail the workflow engine on this machine has without a charge.
   */
  bareHalfLoad?: PhaseFigure;
  bareHalfLoadP99OverIdleP50?: number;
  /** The highest P1 charges/s of this run; half of it is the offered load below. */
  peakChargesPerSecond: number;
  halfLoad: PhaseFigure;
  /** half-load p99 ÷ idle p50 (target ≤ 3). */
  halfLoadP99OverIdleP50: number;
  verification: Verification;
}

export interface P3Result {
  /** The new-charge latency replays are compared with: P5's idle p50. */
  newChargeP50Ms: number;
  sequential: PhaseFigure;
  concurrent: PhaseFigure;
  /** Workflow and query tasks the server handed out during all replays; null without server metrics. */
  workflowTasksDuringReplays: number | null;
  /** Every Temporal frontend call made during the replays, by operation (worker polls left out). */
  temporalCallsDuringReplays: Record<string, number> | null;
  /** replay p50 ÷ new-charge p50 (target ≤ 0.1). */
  p50Ratio: number;
}

const warmupCharges = 20;

/**
 * P5, then P3 on the keys P5 created: the idle latency of one charge at a time, replays of those
 * finished keys, then P5's half-of-peak load.
 */
export async function runLatencyScenarios(
  ctx: BenchContext,
  session: TemporalSession,
  peakChargesPerSecond: number,
  /** The bare workflow's P1 peak (workflows/s); null: its half load is not measured. */
  barePeakPerSecond: number | null = null,
): Promise<{ p5: P5Result; p3: P3Result }> {
  const { settings } = ctx;
  const population = await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, 'p5'), ...spreadPopulationSize });
  const tally = new ChargeTally();
  const newCharge = (keyPrefix: string): Operation => spreadChargeOperation(session.charges, population, tally, keyPrefix);

  await runBounded(warmupCharges, 1, newCharge('p5-warmup'));
  const idle = await measured(ctx, session, () =>
    runClosedLoop({
      label: 'P5 idle, one charge at a time',
      concurrency: 1,
      warmupMs: 0,
      durationMs: 300_000,
      maxOperations: settings.idleCharges,
      operation: newCharge('p5-idle'),
    }),
  );

  const idleBare = await measured(ctx, session, () =>
    runClosedLoop({
      label: 'P5 idle, the bare workflow one at a time',
      concurrency: 1,
      warmupMs: 0,
      durationMs: 300_000,
      maxOperations: settings.idleCharges,
      operation: baselineOperation(ctx, session, population, 'p5-idle-bare', true),
    }),
  );

  const p3 = await runReplays(ctx, session, population, idle);

  const offeredPerSecond = Math.max(1, peakChargesPerSecond / 2);
  const halfLoad = await measured(ctx, session, () =>
    runOpenLoop({
      label: `P5 half of peak (${offeredPerSecond.toFixed(0)}/s offered)`,
      ratePerSecond: offeredPerSecond,
      warmupMs: settings.warmupMs,
      durationMs: settings.durationMs,
      maxInFlight: 512,
      operation: newCharge('p5-half'),
    }),
  );
  const bareHalfLoad =
    barePeakPerSecond === null
      ? null
      : await measured(ctx, session, () =>
          runOpenLoop({
            label: `P5 bare workflow at half of its peak (${Math.max(1, barePeakPerSecond / 2).toFixed(0)}/s offered)`,
            ratePerSecond: Math.max(1, barePeakPerSecond / 2),
            warmupMs: settings.warmupMs,
            durationMs: settings.durationMs,
            maxInFlight: 512,
            operation: baselineOperation(ctx, session, population, 'p5-half-bare', true),
          }),
        );
  await settleUnsettled(session.charges, population.tenant, tally);
  return {
    p5: {
      idle,
      idleBare,
      idleP50OverBareP50: ratio(idle.latency.p50Ms, idleBare.latency.p50Ms),
      peakChargesPerSecond,
      halfLoad,
      halfLoadP99OverIdleP50: ratio(halfLoad.latency.p99Ms, idle.latency.p50Ms),
      ...(bareHalfLoad === null ? {} : { bareHalfLoad, bareHalfLoadP99OverIdleP50: ratio(bareHalfLoad.latency.p99Ms, idleBare.latency.p50Ms) }),
      verification: await verifyScenario(ctx.ledger, population.tenant, tally.succeeded),
    },
    p3,
  };
}

/** P3: the same request again for keys that already finished, one at a time and then concurrently. */
async function runReplays(ctx: BenchContext, session: TemporalSession, population: Population, idle: PhaseFigure): Promise<P3Result> {
  const { settings } = ctx;
  const finishedKeys = Array.from({ length: idle.completed }, (_, sequence) => sequence);
  const payer = spreadPicker(population.payers);
  const payee = spreadPicker(population.payees);
  // The exact body each idle charge was made with: a replay must be the same request.
  const replay: Operation = async (n) => {
    const sequence = finishedKeys[n % finishedKeys.length]!;
    const key = `p5-idle-${sequence}`;
    const reply = await session.charges.charge(population.tenant, key, chargeBody(key, payer(sequence), payee(sequence)));
    if (!reply.replayed || !reply.completed || reply.charge.status !== 'succeeded') {
      throw new Error(`replay of ${key}: replayed=${reply.replayed} completed=${reply.completed} status=${reply.charge.status}`);
    }
  };
  const metricsUrl = ctx.stack.temporalMetricsUrl;
  const before = metricsUrl ? await readSettledServiceRequests(metricsUrl) : null;
  const sequential = await measured(ctx, session, () =>
    runClosedLoop({
      label: 'P3 replays, one at a time',
      concurrency: 1,
      warmupMs: 0,
      durationMs: 120_000,
      maxOperations: settings.replays,
      operation: replay,
    }),
  );
  const concurrent = await measured(ctx, session, () =>
    runClosedLoop({
      label: `P3 replays N=${settings.replayConcurrency}`,
      concurrency: settings.replayConcurrency,
      warmupMs: settings.warmupMs,
      durationMs: settings.durationMs,
      maxOperations: 2_000_000,
      operation: replay,
    }),
  );
  const after = metricsUrl ? await readSettledServiceRequests(metricsUrl) : null;
  return {
    newChargeP50Ms: idle.latency.p50Ms,
    sequential,
    concurrent,
    workflowTasksDuringReplays: before && after ? workflowTasksBetween(before, after) : null,
    temporalCallsDuringReplays: before && after ? callsBetween(before, after) : null,
    p50Ratio: ratio(sequential.latency.p50Ms, idle.latency.p50Ms),
  };
}
