import { ChargeTally, chargeOperation, settleUnsettled } from '../lib/charging.js';
import { detectLedgerStepKind } from '../lib/charge-shape.js';
import { settleDisk } from '../lib/settle.js';
import { measured, tenantFor, type BenchContext, type PhaseFigure } from '../lib/context.js';
import { runBounded, runClosedLoop } from '../lib/load.js';
import { openPopulation, spreadPicker } from '../lib/population.js';
import { openTemporalSession, type SessionOptions } from '../lib/session.js';
import { verifyScenario, type Verification } from '../lib/verify.js';
import { measureThroughputPoint, spreadPopulationSize, type ThroughputPoint } from './p1-throughput.js';

/** One configuration of the dev server and worker placement the issue asks to compare. */
export interface VariantSpec {
  name: string;
  placement: 'in-process' | 'process';
  sqlitePragmas: string[];
}

export interface VariantResult extends VariantSpec {
  point: ThroughputPoint;
  /** One charge at a time, on the otherwise idle variant. */
  idle: PhaseFigure;
  verification: Verification;
}

export const defaultVariants: VariantSpec[] = [
  { name: "rollback journal (the dev server's own default)", placement: 'in-process', sqlitePragmas: [] },
  { name: 'journal_mode=WAL (chargeguard start), worker in process', placement: 'in-process', sqlitePragmas: ['journal_mode=WAL'] },
  { name: 'journal_mode=WAL, worker in its own process', placement: 'process', sqlitePragmas: ['journal_mode=WAL'] },
  { name: 'journal_mode=WAL, synchronous=NORMAL', placement: 'in-process', sqlitePragmas: ['journal_mode=WAL', 'synchronous=NORMAL'] },
  { name: 'journal_mode=WAL, synchronous=OFF (no fsync: ceiling only)', placement: 'in-process', sqlitePragmas: ['journal_mode=WAL', 'synchronous=OFF'] },
];

const idleSamples = 100;

/**
 * How P1 (at one concurrency) and the idle latency move with the dev server's SQLite pragmas and
 * with the worker in a process of its own. Each variant gets a fresh Temporal server (and SQLite
 * file), so none inherits another's history.
 */
export async function runVariants(
  ctx: BenchContext,
  base: Omit<SessionOptions, 'placement' | 'chargeTaskQueue' | 'baselineTaskQueue'>,
  specs: VariantSpec[],
  /** 'mirror': read the charge workflow's step kind from this variant's own first charge. */
  baselineActivities: boolean | 'mirror',
): Promise<VariantResult[]> {
  const results: VariantResult[] = [];
  for (const [index, spec] of specs.entries()) {
    if (ctx.stack.sqlitePragmas === null) {
      ctx.log(`variants: TEMPORAL_ADDRESS is set, skipping "${spec.name}"`);
      continue;
    }
    await settleDisk(ctx);
    await ctx.stack.restartTemporal(spec.sqlitePragmas);
    const session = await openTemporalSession(ctx.stack, {
      ...base,
      placement: spec.placement,
      chargeTaskQueue: `bench-${ctx.runId}-v${index}`,
      baselineTaskQueue: `bench-${ctx.runId}-v${index}-baseline`,
    });
    try {
      const population = await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, `v${index}`), ...spreadPopulationSize });
      const tally = new ChargeTally();
      const operation = chargeOperation(session.charges, {
        tenant: population.tenant,
        keyPrefix: `v${index}-idle`,
        payer: spreadPicker(population.payers, 11),
        payee: spreadPicker(population.payees),
        tally,
      });
      await runBounded(10, 1, (n) => operation(1_000_000 + n)); // warm-up
      const idle = await measured(ctx, session, () =>
        runClosedLoop({ label: `variant "${spec.name}" idle`, concurrency: 1, warmupMs: 0, durationMs: 120_000, maxOperations: idleSamples, operation }),
      );
      const baselineLocalActivities =
        baselineActivities === 'mirror' ? (await detectLedgerStepKind(ctx, session, `v${index}`)) === 'local' : baselineActivities;
      const point = await measureThroughputPoint(ctx, session, population, tally, {
        label: `variant "${spec.name}" N=${ctx.settings.variantConcurrency}`,
        concurrency: ctx.settings.variantConcurrency,
        baselineLocalActivities,
      });
      await settleUnsettled(session.charges, population.tenant, tally);
      results.push({ ...spec, point, idle, verification: await verifyScenario(ctx.ledger, population.tenant, tally.succeeded) });
    } finally {
      await session.close();
    }
  }
  return results;
}
