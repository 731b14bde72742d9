/**
 * Where does a Try + Confirm pair's time go at the ledger, statement by statement? Not part of `npm
 * run bench`: run it with `npx tsx bench/experiments/outbox-profile.ts [commit]`. One fresh embedded
 * PostgreSQL with pg_stat_statements (track = all, so the statements inside the ledger functions and
 * their triggers are counted apart) and track_functions = all (each function's and trigger's own
 * time), migrated with the working tree's migrations and ledger functions, or with a commit's (read
 * with `git archive`, as ledger-schema-ab.ts does; the client code is the working tree's). Pairs
 * (tryHold, confirmHold) in a closed loop at CONCURRENCY callers (default 8), ROUNDS phases; each
 * phase prints PostgreSQL's CPU per pair (all backends, from /proc) and the statements and functions
 * that took the most time, in microseconds per pair (wall time inside the server, so a loaded machine
 * inflates all of them alike: read the shares). Counting every nested statement slows the server a
 * little itself.
 */
import { execFileSync } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { runner } from 'node-pg-migrate';
import { ledgerFunctionSources } from '../../src/ledger/repeatable.js';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { statementProfileSettings, startLedgerPostgresWith } from '../lib/postgres-with-settings.js';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { confirmHold, tryHold } from '../../src/ledger/charges.js';
import { openPopulation, spreadPicker } from '../lib/population.js';
import { ledgerIntent } from '../scenarios/ledger-only.js';
import { runBounded, runClosedLoop } from '../lib/load.js';
import { withCpu } from '../lib/cpu.js';

const commit = process.argv[2];
const phaseMs = Number(process.env.PHASE_MS ?? 6_000);
const concurrency = Number(process.env.CONCURRENCY ?? 8);
const rounds = Number(process.env.ROUNDS ?? 1);
/** Statements and functions printed per side. */
const top = Number(process.env.TOP ?? 14);

const dir = await mkdtemp(join(tmpdir(), 'outbox-profile-'));
await chmod(dir, 0o711);
const options = { dataDir: join(dir, 'pg'), logFilePath: join(dir, 'pg.log') };
const server = await startLedgerPostgresWith(options, { ...statementProfileSettings, track_functions: 'all' });
try {
  if (commit === undefined) {
    await migrateLedger(server.databaseUrl);
  } else {
    // The commit's migrations and function sources, extracted beside each other as in the tree.
    const tar = execFileSync('git', ['archive', commit, 'src/ledger/migrations'], { maxBuffer: 64 * 1024 * 1024 });
    await mkdir(join(dir, 'rev'), { recursive: true });
    execFileSync('tar', ['-x', '-C', join(dir, 'rev')], { input: tar });
    const migrations = join(dir, 'rev/src/ledger/migrations');
    const client = new pg.Client({ connectionString: server.databaseUrl });
    await client.connect();
    try {
      await runner({ dbClient: client, noLock: true, dir: migrations, direction: 'up', migrationsTable: 'ledger_migrations', count: Infinity, log: () => {} });
      for (const source of ledgerFunctionSources(join(migrations, 'repeatable'))) await client.query(source.sql);
    } finally {
      await client.end();
    }
  }
  const pool = createLedgerPool({ databaseUrl: server.databaseUrl, maxConnections: 32, statementTimeoutMs: 600_000 });
  await pool.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  const hist = await openPopulation(pool, { tenant: 'hist', payers: 200, payees: 20 });
  await runBounded(2000, 8, async (i) => {
    const k = `h-${i}`;
    await tryHold(pool, ledgerIntent('hist', k, hist.payers[i % 200]!, hist.payees[i % 20]!), 1000);
    await confirmHold(pool, 'hist', k, null);
  });
  await pool.query('ANALYZE');
  const pop = await openPopulation(pool, { tenant: 'x', payers: 2000, payees: 200 });
  await pool.query('ANALYZE');
  const payer = spreadPicker(pop.payers, concurrency * 7);
  const payee = spreadPicker(pop.payees);
  const postmaster = server.pid === 0 ? null : server.pid;
  let segment = 0;
  const cpuPerPair: number[] = [];
  const perSecond: number[] = [];
  for (let round = 0; round < rounds; round++) {
    segment += 1;
    await pool.query('SELECT pg_stat_statements_reset()');
    await pool.query('SELECT pg_stat_reset()');
    let pairs = 0;
    const { value: result, cpuPercent } = await withCpu({ temporal: null, postgres: postmaster, worker: null }, () =>
      runClosedLoop({
        label: `${commit ?? 'working tree'} N=${concurrency}`,
        concurrency,
        warmupMs: 0,
        durationMs: phaseMs,
        maxOperations: 10_000_000,
        operation: async (sequence) => {
          const key = `p${segment}-${sequence}`;
          await tryHold(pool, ledgerIntent('x', key, payer(sequence), payee(sequence)), 1000);
          await confirmHold(pool, 'x', key, null);
          pairs += 1;
        },
      }),
    );
    const cpuMs = (cpuPercent.postgres! / 100 / result.operationsPerSecond) * 1000;
    cpuPerPair.push(cpuMs);
    perSecond.push(result.operationsPerSecond);
    console.log(`\n== ${commit ?? 'working tree'}, phase ${round + 1}: ${result.operationsPerSecond.toFixed(0)} pairs/s, PostgreSQL CPU ${cpuMs.toFixed(3)} ms per pair, ${pairs} pairs, failed ${result.failed}`);
    const statements = await pool.query<{ query: string; calls: string; us: number }>(
      `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, total_exec_time * 1000 / $1 AS us
         FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC LIMIT $2`,
      [pairs, top],
    );
    for (const row of statements.rows) console.log(`  ${row.us.toFixed(1).padStart(8)} us/pair  calls/pair ${(Number(row.calls) / pairs).toFixed(2)}  ${row.query.slice(0, 150)}`);
    const functions = await pool.query<{ funcname: string; calls: string; self_us: number; total_us: number }>(
      `SELECT funcname, calls, self_time * 1000 / $1 AS self_us, total_time * 1000 / $1 AS total_us
         FROM pg_stat_user_functions ORDER BY self_time DESC LIMIT $2`,
      [pairs, top],
    );
    for (const row of functions.rows) {
      console.log(`  function ${row.funcname.padEnd(32)} calls/pair ${(Number(row.calls) / pairs).toFixed(2)}  self ${row.self_us.toFixed(1)} us  total ${row.total_us.toFixed(1)} us`);
    }
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  console.log(`\nSUMMARY ${commit ?? 'working tree'} N=${concurrency}: pairs/s ${perSecond.map((x) => x.toFixed(0)).join(' ')}; PostgreSQL CPU ms per pair ${cpuPerPair.map((x) => x.toFixed(3)).join(' ')} (mean ${mean(cpuPerPair).toFixed(3)})`);
  await pool.end();
} finally {
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
