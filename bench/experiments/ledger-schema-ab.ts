/**
 * Same-run A/B of versions of the ledger's SQL, and of step batching, for P2. Not part of
 * `npm run bench`: run it with
 * `npx tsx bench/experiments/ledger-schema-ab.ts <commit>[,<commit>...] [phase-seconds]` on a quiet
 * machine. One fresh embedded PostgreSQL holds a database per commit, migrated with that commit's
 * migrations and ledger functions (read with `git archive`), one migrated with the working tree's,
 * and pgbench's TPC-B tables at scale 32. Each ledger gets the bench's history (3,000 charges,
 * ANALYZE) and its own 2,000 payers and 200 payees. The sides: every commit and the working tree
 * with each call alone (batching off), then the working tree with steps batched
 * (src/ledger/step-batches.ts; `maxInFlight` 4, and 2 when BATCH_IN_FLIGHT_B=2). At 8 and 32
 * callers the phases run pgbench, every side, every side in reverse, pgbench, so drift cancels. The
 * client code (`tryHold`, `confirmHold`) is the working tree's for every side, so the comparison is
 * of the SQL; the functions' signatures must not have changed. Every ledger invariant is checked
 * at the end where today's invariant queries can read the schema.
 *
 * ROUNDS=n repeats that sequence n times and prints each round's ratio of every side to the first
 * commit's (the spread tells whether the machine's noise hides the answer); NO_BATCHED=1 leaves the
 * batched sides out (a schema comparison, half the phases).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { ledgerFunctionSources } from '../../src/ledger/repeatable.js';
import { createLedgerPool, type LedgerPool } from '../../src/ledger/pool.js';
import { checkLedgerInvariants } from '../../src/ledger/invariants.js';
import { confirmHold, tryHold } from '../../src/ledger/charges.js';
import { defaultStepBatchLimits, setStepBatchLimits } from '../../src/ledger/step-batches.js';
import { openPopulation, spreadPicker } from '../lib/population.js';
import { runBounded, runClosedLoop } from '../lib/load.js';
import { ledgerIntent } from '../scenarios/ledger-only.js';
import { initTpcb, runPgbench } from '../scenarios/tpcb.js';
import { withCpu } from '../lib/cpu.js';
import { startLedgerPostgres } from '../../src/runtime/local-stack.js';

const bases = (process.argv[2] ?? '').split(',').filter((rev) => rev !== '');
if (bases.length === 0) throw new Error('usage: ledger-schema-ab.ts <commit>[,<commit>...] [phase-seconds]');
const phaseMs = Number(process.argv[3] ?? 10) * 1000;
const warmupMs = 2_000;
const rounds = Number(process.env.ROUNDS ?? 1);
const withBatched = process.env.NO_BATCHED !== '1';
const historyCharges = 3_000;

/** The base commit's migrations and function sources, extracted beside each other as in the tree. */
async function extractBase(rev: string, dir: string): Promise<{ migrations: string; functions: string }> {
  const tar = execFileSync('git', ['archive', rev, 'src/ledger/migrations'], { maxBuffer: 64 * 1024 * 1024 });
  await mkdir(dir, { recursive: true });
  execFileSync('tar', ['-x', '-C', dir], { input: tar });
  const migrations = join(dir, 'src/ledger/migrations');
  return { migrations, functions: join(migrations, 'repeatable') };
}

async function migrateFrom(databaseUrl: string, dirs: { migrations: string; functions: string }): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await runner({ dbClient: client, noLock: true, dir: dirs.migrations, direction: 'up', migrationsTable: 'ledger_migrations', count: Infinity, log: () => {} });
    for (const source of ledgerFunctionSources(dirs.functions)) await client.query(source.sql);
  } finally {
    await client.end();
  }
}

interface Side {
  name: string;
  pool: LedgerPool;
  payers: string[];
  payees: string[];
  confirmed: number;
}

async function prepare(name: string, pool: LedgerPool): Promise<Side> {
  const hist = await openPopulation(pool, { tenant: 'hist', payers: 200, payees: 20 });
  await runBounded(historyCharges, 8, async (i) => {
    const key = `h-${i}`;
    await tryHold(pool, ledgerIntent('hist', key, hist.payers[i % 200]!, hist.payees[i % 20]!), 1000);
    await confirmHold(pool, 'hist', key, null);
  });
  await pool.query('ANALYZE');
  const pop = await openPopulation(pool, { tenant: 'x', payers: 2000, payees: 200 });
  await pool.query('ANALYZE');
  return { name, pool, payers: pop.payers, payees: pop.payees, confirmed: 0 };
}

async function ledgerPhase(side: Side, concurrency: number, segment: number): Promise<number> {
  const payer = spreadPicker(side.payers, concurrency * 7);
  const payee = spreadPicker(side.payees);
  const result = await runClosedLoop({
    label: `${side.name} N=${concurrency}`,
    concurrency,
    warmupMs,
    durationMs: phaseMs,
    maxOperations: 10_000_000,
    operation: async (sequence) => {
      const key = `s${segment}-${concurrency}-${sequence}`;
      await tryHold(side.pool, ledgerIntent('x', key, payer(sequence), payee(sequence)), 1000);
      await confirmHold(side.pool, 'x', key, null);
      side.confirmed += 1;
    },
  });
  if (result.failed > 0) throw new Error(`${side.name}: ${result.failed} failed, e.g. ${result.failureSamples[0]}`);
  return result.operationsPerSecond;
}

const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

const dir = await mkdtemp(join(tmpdir(), 'ledger-ab-'));
await chmod(dir, 0o711);
const server = await startLedgerPostgres({ dataDir: join(dir, 'pg'), logFilePath: join(dir, 'pg.log') });
const pools: LedgerPool[] = [];
try {
  const admin = new pg.Client({ connectionString: server.databaseUrl });
  await admin.connect();
  for (let i = 0; i < bases.length; i++) await admin.query(`CREATE DATABASE ab_${i}`);
  for (const db of ['ab_head', 'ab_tpcb']) await admin.query(`CREATE DATABASE ${db}`);
  await admin.end();
  const urlOf = (db: string): string => {
    const url = new URL(server.databaseUrl);
    url.pathname = `/${db}`;
    return url.toString();
  };
  for (let i = 0; i < bases.length; i++) await migrateFrom(urlOf(`ab_${i}`), await extractBase(bases[i]!, join(dir, `rev-${i}`)));
  await migrateLedger(urlOf('ab_head'));
  await initTpcb(urlOf('ab_tpcb'), 32);
  const poolOf = (db: string): LedgerPool => {
    const pool = createLedgerPool({ databaseUrl: urlOf(db), maxConnections: 32, statementTimeoutMs: 600_000 });
    pools.push(pool);
    return pool;
  };
  const unbatched = { maxInFlight: 64, maxBatchSize: 1 };
  const sides: Side[] = [];
  for (let i = 0; i < bases.length; i++) sides.push(await prepare(bases[i]!, poolOf(`ab_${i}`)));
  const headSide = await prepare('working tree', poolOf('ab_head'));
  sides.push(headSide);
  for (const side of sides) setStepBatchLimits(side.pool, unbatched);
  // The same database as the working tree's, through pools that batch steps.
  const batchedSides: Side[] = [{ ...headSide, name: `working tree, batched (in flight ${defaultStepBatchLimits.maxInFlight})`, pool: poolOf('ab_head'), confirmed: 0 }];
  if (process.env.BATCH_IN_FLIGHT_B) {
    const maxInFlight = Number(process.env.BATCH_IN_FLIGHT_B);
    const side = { ...headSide, name: `working tree, batched (in flight ${maxInFlight})`, pool: poolOf('ab_head'), confirmed: 0 };
    setStepBatchLimits(side.pool, { ...defaultStepBatchLimits, maxInFlight });
    batchedSides.push(side);
  }
  if (withBatched) sides.push(...batchedSides);
  else batchedSides.length = 0;
  const postmaster = await (async () => {
    const { rows } = await headSide.pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const stat = readFileSync(`/proc/${rows[0]!.pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
  })();
  const table: string[] = [];
  let segment = 0;
  for (const concurrency of [8, 32]) {
    const names = ['pgbench', ...sides.map((side) => side.name)];
    const perSecond = new Map<string, number[]>(names.map((name) => [name, []]));
    // CPU milliseconds per operation: PostgreSQL (all backends) and this process (the pg driver side).
    const postgresMs = new Map<string, number[]>(names.map((name) => [name, []]));
    const clientMs = new Map<string, number[]>(names.map((name) => [name, []]));
    const order: (Side | null)[] = Array.from({ length: rounds }, () => [null, ...sides, ...[...sides].reverse(), null]).flat();
    for (const side of order) {
      segment += 1;
      const name = side?.name ?? 'pgbench';
      const { value, cpuPercent } = await withCpu({ temporal: null, postgres: postmaster, worker: null }, async () =>
        side === null
          ? (await runPgbench(urlOf('ab_tpcb'), { label: `pgbench N=${concurrency}`, concurrency, durationMs: phaseMs })).operationsPerSecond
          : await ledgerPhase(side, concurrency, segment),
      );
      perSecond.get(name)!.push(value);
      postgresMs.get(name)!.push((cpuPercent.postgres! / 100 / value) * 1000);
      clientMs.get(name)!.push((cpuPercent.bench! / 100 / value) * 1000);
      console.log(`${name} N=${concurrency}: ${value.toFixed(0)}/s, PostgreSQL ${cpuPercent.postgres}% of a core, this process ${cpuPercent.bench}%`);
    }
    // Each round ran every side twice (forward, then reverse): its ratio to the first commit's side.
    const baseName = sides[0]!.name;
    for (const name of names.filter((candidate) => candidate !== 'pgbench' && candidate !== baseName)) {
      const perRound = Array.from({ length: rounds }, (_, round) => {
        const of = (side: string) => mean(perSecond.get(side)!.slice(round * 2, round * 2 + 2));
        const cpu = (side: string) => mean(postgresMs.get(side)!.slice(round * 2, round * 2 + 2));
        return `${(of(name) / of(baseName)).toFixed(2)} (CPU ${cpu(baseName).toFixed(2)} → ${cpu(name).toFixed(2)} ms)`;
      });
      console.log(`ROUNDS N=${concurrency}: ${name} ÷ ${baseName}, per round: ${perRound.join(', ')}`);
    }
    const tpcb = mean(perSecond.get('pgbench')!);
    let previous: number | null = null;
    for (const name of names) {
      const figure = mean(perSecond.get(name)!);
      table.push(
        `| ${concurrency} | ${name} | ${figure.toFixed(0)} | ${(figure / tpcb).toFixed(2)} | ${previous === null || name === 'pgbench' ? '' : (figure / previous).toFixed(2)} | ${mean(postgresMs.get(name)!).toFixed(3)} | ${name === 'pgbench' ? '(C client)' : mean(clientMs.get(name)!).toFixed(3)} |`,
      );
      previous = name === 'pgbench' ? null : figure;
    }
  }
  for (const side of batchedSides) headSide.confirmed += side.confirmed;
  for (const side of sides.filter((candidate) => !batchedSides.includes(candidate))) {
    const hot = (await side.pool.query<{ upd: string; hot: string }>(
      `SELECT n_tup_upd AS upd, n_tup_hot_upd AS hot FROM pg_stat_user_tables WHERE relname = 'charges'`,
    )).rows[0]!;
    console.log(`${side.name}: charges updates ${hot.upd}, of them HOT ${hot.hot}`);
    // An older schema may lack what today's invariants read; its figures then stand unchecked.
    const checks = await checkLedgerInvariants(side.pool).catch((error: Error) => error);
    if (checks instanceof Error) {
      console.log(`${side.name}: invariants not checkable with today's queries (${checks.message})`);
      continue;
    }
    const failed = checks.filter((check) => check.violations > 0);
    const captures = (await side.pool.query<{ n: string }>(`SELECT count(*) AS n FROM transfers WHERE tenant = 'x' AND kind = 'capture'`)).rows[0]!.n;
    console.log(`${side.name}: invariants ${failed.length === 0 ? 'clean' : `VIOLATED: ${failed.map((c) => c.name).join(', ')}`}; captures ${captures}, callers told confirmed ${side.confirmed}`);
  }
  console.log(
    `\n| N | side | per second | ÷ pgbench | ÷ the row above | PostgreSQL CPU ms per op | driver CPU ms per op |\n|---|---|---:|---:|---:|---:|---:|\n${table.join('\n')}`,
  );
} finally {
  await Promise.all(pools.map((pool) => pool.end()));
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
