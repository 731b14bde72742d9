import { measured, tenantFor, type BenchContext, type PhaseFigure } from '../lib/context.js';
import { openPopulation, spreadPicker } from '../lib/population.js';
import { ratio } from '../lib/stats.js';
import { verifyScenario, type Verification } from '../lib/verify.js';
import { LedgerTally, runLedgerPhase } from './ledger-only.js';
import { spreadPopulationSize } from './p1-throughput.js';
import { dropTpcb, initTpcb, pgbenchVersion, runPgbench, runTpcbWithPg } from './tpcb.js';

export interface LedgerPoint {
  concurrency: number;
  charge: PhaseFigure;
  tpcbWithPg: PhaseFigure;
  /** null when pgbench is not installed. */
  pgbench: PhaseFigure | null;
  /** Which TPC-B run the ratio is taken against: pgbench when installed (the issue's choice), else the pg one. */
  baselineName: 'pgbench' | 'tpcb-pg';
  /** Try+Confirm pairs per second ÷ TPC-B transactions per second. */
  ratio: number;
}

export interface P2Result {
  points: LedgerPoint[];
  tpcbScale: number;
  pgbench: string | null;
  verification: Verification;
}

/** P2: ledger-only Try+Confirm pairs per second against TPC-B on the same database, per concurrency. */
export async function runP2(ctx: BenchContext): Promise<P2Result> {
  const { settings } = ctx;
  const pgbench = await pgbenchVersion();
  ctx.log(`P2: loading TPC-B tables at scale ${settings.tpcbScale}${pgbench ? ` (${pgbench})` : ' (pgbench not installed: pg driver only)'}`);
  await initTpcb(ctx.stack.databaseUrl, settings.tpcbScale);
  const population = await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, 'p2'), ...spreadPopulationSize });
  const tally = new LedgerTally();
  const points: LedgerPoint[] = [];
  try {
    for (const concurrency of settings.p2Concurrency) {
      const tpcbWithPg = await measured(ctx, null, () =>
        runTpcbWithPg(ctx.stack.databaseUrl, {
          label: `P2 TPC-B (pg) N=${concurrency}`,
          concurrency,
          scale: settings.tpcbScale,
          warmupMs: settings.warmupMs,
          durationMs: settings.durationMs,
        }),
      );
      const pgbenchRun = pgbench === null
        ? null
        : await measured(ctx, null, () =>
            runPgbench(ctx.stack.databaseUrl, { label: `P2 TPC-B (pgbench) N=${concurrency}`, concurrency, durationMs: settings.durationMs }),
          );
      const charge = await runLedgerPhase(ctx, {
        label: `P2 ledger Try+Confirm N=${concurrency}`,
        tenant: population.tenant,
        keyPrefix: `p2-${concurrency}`,
        concurrency,
        payer: spreadPicker(population.payers, concurrency * 7),
        payee: spreadPicker(population.payees),
        tally,
      });
      const baseline = pgbenchRun ?? tpcbWithPg;
      points.push({
        concurrency,
        charge,
        tpcbWithPg,
        pgbench: pgbenchRun,
        baselineName: pgbenchRun ? 'pgbench' : 'tpcb-pg',
        ratio: ratio(charge.operationsPerSecond, baseline.operationsPerSecond),
      });
    }
  } finally {
    await dropTpcb(ctx.stack.databaseUrl);
  }
  return {
    points,
    tpcbScale: settings.tpcbScale,
    pgbench,
    verification: await verifyScenario(ctx.ledger, population.tenant, tally.confirmed),
  };
}
