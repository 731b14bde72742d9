/**
 * What does the transactional outbox cost a charge at the ledger? Not part of `npm run bench`: run
 * it with `npx tsx bench/experiments/outbox-cost.ts`. On one fresh embedded PostgreSQL with a
 * little history, Try + Confirm pairs (tryHold, confirmHold: the app's own prepared, batched steps)
 * in a closed loop at 8 and 32 callers (CONCURRENCY), alternating A B B A (ROUNDS times) between the charge writers switched on
 * (each charge writes charge.reserved and charge.succeeded) and off (ALTER TABLE … DISABLE TRIGGER,
 * in this scratch database only), so load on the machine hits both alike.
 *
 * Since migration 1763800000300 a ledger charge's steps write its events themselves and the
 * triggers switched here fire only for provider charges: both sides of this experiment now write
 * the events of the ledger charges it makes (a ratio near 1 says nothing). The outbox's cost at the
 * ledger is measured against the commit before it: `ROUNDS=3 NO_BATCHED=1 npx tsx
 * bench/experiments/ledger-schema-ab.ts 59e6864 6` (docs/bench.md, The outbox's cost).
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startLedgerPostgres } from '../../src/runtime/local-stack.js';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { confirmHold, tryHold } from '../../src/ledger/charges.js';
import { openPopulation } from '../lib/population.js';
import { ledgerIntent } from '../scenarios/ledger-only.js';
import { runBounded, runClosedLoop } from '../lib/load.js';

const phaseMs = Number(process.env.PHASE_MS ?? 6_000);
/** Callers per phase, e.g. CONCURRENCY=1,8; ROUNDS of A B B A each. */
const concurrencies = (process.env.CONCURRENCY ?? '8,32').split(',').map(Number);
const rounds = Number(process.env.ROUNDS ?? 1);
const dir = await mkdtemp(join(tmpdir(), 'outbox-cost-'));
await chmod(dir, 0o711);
const server = await startLedgerPostgres({ dataDir: join(dir, 'pg'), logFilePath: join(dir, 'pg.log') });
try {
  await migrateLedger(server.databaseUrl);
  const pool = createLedgerPool({ databaseUrl: server.databaseUrl, maxConnections: 32, statementTimeoutMs: 600_000 });
  const hist = await openPopulation(pool, { tenant: 'hist', payers: 200, payees: 20 });
  await runBounded(2000, 8, async (i) => {
    const k = `h-${i}`;
    await tryHold(pool, ledgerIntent('hist', k, hist.payers[i % 200]!, hist.payees[i % 20]!), 1000);
    await confirmHold(pool, 'hist', k, null);
  });
  await pool.query('ANALYZE');
  const pop = await openPopulation(pool, { tenant: 'x', payers: 2000, payees: 200 });
  const writers = async (on: boolean) => {
    for (const trigger of ['charges_event', 'charges_state_event']) await pool.query(`ALTER TABLE charges ${on ? 'ENABLE' : 'DISABLE'} TRIGGER ${trigger}`);
  };
  const results: Record<string, number[]> = {};
  let seq = 0;
  for (const concurrency of concurrencies) {
    for (const outbox of Array.from({ length: rounds }, () => [true, false, false, true]).flat()) {
      await writers(outbox);
      const name = `${outbox ? 'with the outbox' : 'without'} N=${concurrency}`;
      const r = await runClosedLoop({
        label: name,
        concurrency,
        warmupMs: 1_500,
        durationMs: phaseMs,
        maxOperations: 1_000_000,
        operation: async () => {
          const i = seq++;
          const k = `x-${i}`;
          await tryHold(pool, ledgerIntent('x', k, pop.payers[i % 2000]!, pop.payees[i % 200]!), 1000);
          await confirmHold(pool, 'x', k, null);
        },
      });
      (results[name] ??= []).push(r.operationsPerSecond);
      console.log(`RESULT ${name}: ${r.operationsPerSecond.toFixed(0)} Try+Confirm pairs/s, p50 ${r.latency.p50Ms.toFixed(1)} ms, failed ${r.failed}`);
    }
  }
  await writers(true);
  for (const concurrency of concurrencies) {
    const mean = (name: string) => results[`${name} N=${concurrency}`]!.reduce((a, b) => a + b, 0) / (2 * rounds);
    console.log(`SUMMARY N=${concurrency}: with ${mean('with the outbox').toFixed(0)}/s, without ${mean('without').toFixed(0)}/s, ratio ${(mean('with the outbox') / mean('without')).toFixed(3)}`);
  }
  await pool.end();
} finally {
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
