import { baselineWorkflowType, type BaselineInput } from '../baseline-workflow.js';
import { ChargeTally, chargeBody, chargeOperation, settleUnsettled } from '../lib/charging.js';
import { measured, tenantFor, type BenchContext, type PhaseFigure } from '../lib/context.js';
import { runInterleaved } from '../lib/interleave.js';
import { runClosedLoop, type Operation } from '../lib/load.js';
import { openPopulation, spreadPicker, type Population } from '../lib/population.js';
import { benchPolicy, type TemporalSession } from '../lib/session.js';
import { ratio } from '../lib/stats.js';
import { verifyScenario, type Verification } from '../lib/verify.js';

export interface ThroughputPoint {
  concurrency: number;
  charge: PhaseFigure;
  baseline: PhaseFigure;
  /** charges/s ÷ baseline workflows/s. */
  ratio: number;
  /**
   * Charges per CPU-second of the whole machine (worker, Temporal, PostgreSQL, the load side and
   * anything else running), and the bare workflow's: what a fleet is sized by. Null when the
   * machine's busy time could not be read.
   */
  chargesPerMachineCpuSecond: number | null;
  baselinePerMachineCpuSecond: number | null;
}

/** Operations per second of all the machine's cores busy: operations/s ÷ (busy percent of one core / 100). */
export function perMachineCpuSecond(phase: PhaseFigure): number | null {
  const busyPercent = phase.cpuPercent.machine;
  if (busyPercent === undefined || !(busyPercent > 0)) return null;
  return phase.operationsPerSecond / (busyPercent / 100);
}

export interface P1Result {
  points: ThroughputPoint[];
  baselineActivityKind: 'local' | 'remote';
  verification: Verification;
}

/** Enough payers that concurrent charges never share one (P1 measures Temporal, not row locks). */
export const spreadPopulationSize = { payers: 2_000, payees: 200 };

/**
 * P1: new charges per second through Temporal, closed loop, for each concurrency, each measured
 * right next to the bare workflow of the same shape on the same server, queue settings and worker.
 */
export async function runP1(
  ctx: BenchContext,
  session: TemporalSession,
  options: { scenario: string; concurrency: number[]; baselineLocalActivities: boolean },
): Promise<P1Result> {
  const population = await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, options.scenario), ...spreadPopulationSize });
  const tally = new ChargeTally();
  const points: ThroughputPoint[] = [];
  for (const concurrency of options.concurrency) {
    points.push(await measureThroughputPoint(ctx, session, population, tally, {
      label: `${options.scenario} N=${concurrency}`,
      concurrency,
      baselineLocalActivities: options.baselineLocalActivities,
    }));
  }
  await settleUnsettled(session.charges, population.tenant, tally);
  return {
    points,
    baselineActivityKind: options.baselineLocalActivities ? 'local' : 'remote',
    verification: await verifyScenario(ctx.ledger, population.tenant, tally.succeeded),
  };
}

/** One concurrency: the baseline and the charges interleaved (A B B A) on the same session. */
export async function measureThroughputPoint(
  ctx: BenchContext,
  session: TemporalSession,
  population: Population,
  tally: ChargeTally,
  options: { label: string; concurrency: number; baselineLocalActivities: boolean },
): Promise<ThroughputPoint> {
  const { settings } = ctx;
  const keyPrefix = `${options.label.replace(/[^a-zA-Z0-9]+/g, '-')}`;
  const maxOperations = 200_000;
  const { a: baseline, b: charge } = await runInterleaved(
    settings.durationMs,
    ({ index, durationMs, latencySinkMs }) =>
      measured(ctx, session, () =>
        runClosedLoop({
          label: `${options.label} baseline`,
          concurrency: options.concurrency,
          warmupMs: settings.warmupMs,
          durationMs,
          maxOperations,
          latencySinkMs,
          operation: baselineOperation(ctx, session, population, `${keyPrefix}-s${index}`, options.baselineLocalActivities),
        }),
        { machine: true },
      ),
    ({ index, durationMs, latencySinkMs }) =>
      measured(ctx, session, () =>
        runClosedLoop({
          label: `${options.label} charges`,
          concurrency: options.concurrency,
          warmupMs: settings.warmupMs,
          durationMs,
          maxOperations,
          latencySinkMs,
          operation: chargeOperation(session.charges, {
            tenant: population.tenant,
            keyPrefix: `${keyPrefix}-s${index}`,
            // Offset by the concurrency so consecutive points do not start on the same payers.
            payer: spreadPicker(population.payers, options.concurrency * 7 + index * 1_000),
            payee: spreadPicker(population.payees),
            tally,
          }),
        }),
        { machine: true },
      ),
  );
  return {
    concurrency: options.concurrency,
    charge,
    baseline,
    ratio: ratio(charge.operationsPerSecond, baseline.operationsPerSecond),
    chargesPerMachineCpuSecond: perMachineCpuSecond(charge),
    baselinePerMachineCpuSecond: perMachineCpuSecond(baseline),
  };
}

/** The bare workflow, carrying a charge intent of the same size as the real one. */
export function baselineOperation(
  ctx: BenchContext,
  session: TemporalSession,
  population: Population,
  keyPrefix: string,
  localActivities: boolean,
): Operation {
  const taskQueue = session.options.baselineTaskQueue;
  if (taskQueue === null) throw new Error('this session has no baseline worker');
  return async (sequence) => {
    const key = `${keyPrefix}-baseline-${sequence}`;
    const intent = session.charges.buildIntent(population.tenant, key, chargeBody(key, population.payers[0]!, population.payees[0]!));
    const input: BaselineInput = { payload: { intent, policy: benchPolicy }, localActivities };
    await session.temporal.workflow.execute(baselineWorkflowType, {
      taskQueue,
      workflowId: `bench-baseline/${ctx.runId}/${key}`,
      args: [input],
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
      ...(session.eagerStart ? { requestEagerStart: true } : {}),
    });
  };
}
