import { ChargeTally, chargeOperation, settleUnsettled } from '../lib/charging.js';
import { measured, tenantFor, type BenchContext, type PhaseFigure } from '../lib/context.js';
import { runInterleaved } from '../lib/interleave.js';
import { runBounded, runClosedLoop } from '../lib/load.js';
import { openPopulation, spreadPicker } from '../lib/population.js';
import { openTemporalSession, type SessionOptions, type TemporalSession } from '../lib/session.js';
import { ratio } from '../lib/stats.js';
import { verifyScenario, type Verification } from '../lib/verify.js';
import { spreadPopulationSize } from './p1-throughput.js';

/** The processes one side of the comparison runs the workers in. */
export const scaleOutProcessCounts = { one: 1, two: 2 } as const;

/** What held the two-process side back, read from the CPU the components used meanwhile. */
export interface ScaleOutBound {
  /**
   * cores: the machine's cores were (nearly) all busy; component: one component used about a core
   * or more while the cores had room; none: neither, so the callers waited on round trips.
   */
  kind: 'cores' | 'component' | 'none';
  /** The sentence the report prints, with the shares it rests on. */
  explanation: string;
}

export interface ScaleOutResult {
  concurrency: number;
  /** charges/s etc. with every worker in one process. */
  oneProcess: PhaseFigure;
  /** The same load with the workers in two processes polling the same task queues. */
  twoProcesses: PhaseFigure;
  /** two processes ÷ one process, charges/s (2 would be perfect scaling). */
  ratio: number;
  cores: number;
  bound: ScaleOutBound;
  verification: { oneProcess: Verification; twoProcesses: Verification };
}

/**
 * Unmeasured charges per caller each side makes before the comparison: freshly started worker
 * processes load the workflow bundle and JIT-compile on their first tasks, which on a busy machine
 * took longer than a whole short segment.
 */
const warmupChargesPerCaller = 2;

/** Busy share of all the cores at or above which the machine counts as full. */
const coresFullFraction = 0.9;
/** A component at or above this percent of one core counts as a possible bound on its own. */
const componentFullPercent = 90;

/**
 * Scale-out on the cluster: the same closed-loop load generator (this process, N callers) against
 * the charge worker in one process, then in two processes sharing the task queue, interleaved
 * A B B A. Both sides stay up for the whole comparison, each on a task queue of its own, so a side's
 * workers only take its own tasks (the other side's pollers idle on long polls).
 */
export async function runScaleOut(ctx: BenchContext, base: Pick<SessionOptions, 'tuning' | 'bundles'>, cores: number): Promise<ScaleOutResult> {
  const { settings } = ctx;
  const concurrency = settings.scaleOutConcurrency;
  const sides = [
    { name: 'one', processes: scaleOutProcessCounts.one },
    { name: 'two', processes: scaleOutProcessCounts.two },
  ] as const;
  const sessions: TemporalSession[] = [];
  try {
    for (const side of sides) {
      sessions.push(
        await openTemporalSession(ctx.stack, {
          ...base,
          placement: 'process',
          workerProcesses: side.processes,
          // Eager start needs the workers in the load generator's process.
          eagerStart: false,
          chargeTaskQueue: `bench-${ctx.runId}-scale-${side.name}`,
          baselineTaskQueue: null,
        }),
      );
    }
    const [oneSession, twoSession] = sessions as [TemporalSession, TemporalSession];
    const populations = {
      one: await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, 'scale-one'), ...spreadPopulationSize }),
      two: await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, 'scale-two'), ...spreadPopulationSize }),
    };
    const tallies = { one: new ChargeTally(), two: new ChargeTally() };
    const operation = (side: 'one' | 'two', session: TemporalSession, keyPrefix: string, payerOffset: number) =>
      chargeOperation(session.charges, {
        tenant: populations[side].tenant,
        keyPrefix,
        payer: spreadPicker(populations[side].payers, payerOffset),
        payee: spreadPicker(populations[side].payees),
        tally: tallies[side],
      });
    await runBounded(concurrency * warmupChargesPerCaller, concurrency, operation('one', oneSession, 'scale-one-warmup', 500));
    await runBounded(concurrency * warmupChargesPerCaller, concurrency, operation('two', twoSession, 'scale-two-warmup', 500));
    const segment = (side: 'one' | 'two', session: TemporalSession) =>
      ({ index, durationMs, latencySinkMs }: { index: number; durationMs: number; latencySinkMs: number[] }) =>
        measured(
          ctx,
          session,
          () =>
            runClosedLoop({
              label: `scale-out N=${concurrency}, ${scaleOutProcessCounts[side]} worker process${side === 'one' ? '' : 'es'}`,
              concurrency,
              warmupMs: settings.warmupMs,
              durationMs,
              maxOperations: 200_000,
              latencySinkMs,
              operation: operation(side, session, `scale-${side}-s${index}`, index * 1_000),
            }),
          { machine: true },
        );
    const { a: oneProcess, b: twoProcesses } = await runInterleaved(settings.durationMs, segment('one', oneSession), segment('two', twoSession));
    await settleUnsettled(oneSession.charges, populations.one.tenant, tallies.one);
    await settleUnsettled(twoSession.charges, populations.two.tenant, tallies.two);
    return {
      concurrency,
      oneProcess,
      twoProcesses,
      ratio: ratio(twoProcesses.operationsPerSecond, oneProcess.operationsPerSecond),
      cores,
      bound: scaleOutBound(twoProcesses.cpuPercent, cores),
      verification: {
        oneProcess: await verifyScenario(ctx.ledger, populations.one.tenant, tallies.one.succeeded),
        twoProcesses: await verifyScenario(ctx.ledger, populations.two.tenant, tallies.two.succeeded),
      },
    };
  } finally {
    await Promise.allSettled(sessions.map((session) => session.close()));
  }
}

const componentNames: Record<string, string> = {
  bench: 'load generator',
  worker: 'worker processes',
  temporal: 'Temporal server',
  postgres: 'PostgreSQL (ledger + Temporal persistence)',
};

/**
 * Names what bounds the two-process side from the CPU percentages (of one core) measured while it
 * ran. The machine's own busy time says whether the cores were full; the components' shares say
 * where they went, and what is left of `machine` went to processes outside the run.
 */
export function scaleOutBound(cpuPercent: Readonly<Record<string, number>>, cores: number): ScaleOutBound {
  const capacity = cores * 100;
  const components = Object.entries(cpuPercent)
    .filter(([name]) => name in componentNames)
    .sort(([, a], [, b]) => b - a);
  const ours = components.reduce((sum, [, percent]) => sum + percent, 0);
  const shares = components.map(([name, percent]) => `${componentNames[name]} ${percent}%`).join(', ');
  const machine = cpuPercent.machine;
  const busy = machine ?? ours;
  const outside = machine === undefined ? '' : `, other processes ${Math.max(0, machine - ours)}%`;
  const detail = `${busy}% of ${capacity}% busy (${shares}${outside}; percent of one core)`;
  if (busy >= capacity * coresFullFraction) {
    return { kind: 'cores', explanation: `the machine's ${cores} cores: ${detail}. A second worker process can only take CPU from the Temporal server and PostgreSQL on the same cores.` };
  }
  const [topName, topPercent] = components[0] ?? ['', 0];
  if (topPercent >= componentFullPercent) {
    return { kind: 'component', explanation: `the ${componentNames[topName]} at ${topPercent}% of a core while the cores had room: ${detail}.` };
  }
  return { kind: 'none', explanation: `no CPU: ${detail}; the callers wait on round trips (Temporal and PostgreSQL latency), not on a full resource.` };
}
