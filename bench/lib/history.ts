import { confirmHold, tryHold } from '../../src/ledger/charges.js';
import { analyzeLedger } from '../../src/ledger/maintenance.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { ledgerIntent } from '../scenarios/ledger-only.js';
import type { BenchContext } from './context.js';
import { runBounded } from './load.js';
import { openPopulation } from './population.js';
import { benchPolicy } from './session.js';

/**
 * Gives the fresh database a little history and statistics before anything is measured. On empty,
 * never-analysed tables the planner caches plans that look rows up by the wrong index (or scan the
 * table), and the ledger functions get slower with every row until autovacuum's first ANALYZE, a
 * minute or more later. A production ledger has history and statistics; the bench measures that.
 */
export async function seedLedgerHistory(ctx: BenchContext, charges: number): Promise<void> {
  const population = await openPopulation(ctx.ledger, { tenant: `bench-${ctx.runId}-history`, payers: 200, payees: 20 });
  const pool = createLedgerPool({ databaseUrl: ctx.stack.databaseUrl, maxConnections: 8 });
  try {
    await runBounded(charges, 8, async (n) => {
      const key = `history-${n}`;
      const intent = ledgerIntent(population.tenant, key, population.payers[n % 200]!, population.payees[n % 20]!);
      await tryHold(pool, intent, benchPolicy.holdTtlMs);
      await confirmHold(pool, population.tenant, key, null);
    });
  } finally {
    await pool.end();
  }
  await analyzeLedger(ctx.ledger);
}
