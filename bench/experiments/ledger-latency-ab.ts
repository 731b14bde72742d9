/**
 * What one charge's ledger steps cost in time at one caller (P1 at N = 1 is pure latency), this
 * tree's SQL against older commits' and against variants of this tree's. Not part of `npm run
 * bench`: run it with
 * `npx tsx bench/experiments/ledger-latency-ab.ts <commit>[,<commit>...] [pairs-per-side] [variant ...]`
 * on a quiet machine. One fresh embedded PostgreSQL holds a database per commit (its migrations and
 * ledger functions, read with `git archive`), one migrated with the working tree's, and one per
 * variant: the working tree's, then the variant's SQL (below) on top. Each gets the bench's history
 * (3,000 charges, ANALYZE) and its own 2,000 payers and 200 payees. Then one caller runs Try then
 * Confirm (`tryHold`, `confirmHold`, the worker's calls) on every side in turn, one pair per side
 * per turn, the order rotating, so drift and the machine's load fall on every side alike; a pair's
 * time is from Try's send to Confirm's answer. Printed per side: p50, mean and p90 of a pair, each
 * step's p50, and the difference of the p50 to the first commit's, and each side's events heap size.
 */
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runner } from 'node-pg-migrate';
import pg from 'pg';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { ledgerFunctionSources } from '../../src/ledger/repeatable.js';
import { createLedgerPool, type LedgerPool } from '../../src/ledger/pool.js';
import { confirmHold, tryHold } from '../../src/ledger/charges.js';
import { openPopulation, spreadPicker } from '../lib/population.js';
import { runBounded } from '../lib/load.js';
import { ledgerIntent } from '../scenarios/ledger-only.js';
import { startLedgerPostgres } from '../../src/runtime/local-stack.js';

/** Changes of the working tree's ledger, each on a database of its own, to attribute a difference. */
const variants: Record<string, string> = {
  // The secondary indexes of events that a write maintains (the unique keys stay). (The webhook
  // fan-out trigger this once also measured is gone since migration 370.)
  'no-event-indexes': 'DROP INDEX events_by_type; DROP INDEX events_by_xact; DROP INDEX events_by_tenant; DROP INDEX events_by_tenant_xact',
  // The partial index of charges made without a key (the bench's charges are).
  'no-keyless-index': 'DROP INDEX charges_without_key',
};

const bases = (process.argv[2] ?? '').split(',').filter((rev) => rev !== '');
if (bases.length === 0) throw new Error('usage: ledger-latency-ab.ts <commit>[,<commit>...] [pairs-per-side] [variant ...]');
const pairs = Number(process.argv[3] ?? 1000);
const variantNames = process.argv.slice(4);
for (const name of variantNames) if (!(name in variants)) throw new Error(`unknown variant ${name}; known: ${Object.keys(variants).join(', ')}`);
const warmupPairs = 100;
const historyCharges = 3_000;

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
  payer: (n: number) => string;
  payee: (n: number) => string;
  pairMs: number[];
  tryMs: number[];
  confirmMs: number[];
  done: number;
}

async function prepare(name: string, pool: LedgerPool): Promise<Side> {
  const hist = await openPopulation(pool, { tenant: 'hist', payers: 200, payees: 20 });
  await runBounded(historyCharges, 4, async (i) => {
    const key = `h-${i}`;
    await tryHold(pool, ledgerIntent('hist', key, hist.payers[i % 200]!, hist.payees[i % 20]!), 1000);
    await confirmHold(pool, 'hist', key, null);
  });
  const pop = await openPopulation(pool, { tenant: 'x', payers: 2000, payees: 200 });
  await pool.query('ANALYZE');
  return { name, pool, payer: spreadPicker(pop.payers, 7), payee: spreadPicker(pop.payees), pairMs: [], tryMs: [], confirmMs: [], done: 0 };
}

async function onePair(side: Side, record: boolean): Promise<void> {
  const n = side.done++;
  const key = `p-${n}`;
  const startedAt = performance.now();
  await tryHold(side.pool, ledgerIntent('x', key, side.payer(n), side.payee(n)), 1000);
  const triedAt = performance.now();
  await confirmHold(side.pool, 'x', key, null);
  const endedAt = performance.now();
  if (!record) return;
  side.pairMs.push(endedAt - startedAt);
  side.tryMs.push(triedAt - startedAt);
  side.confirmMs.push(endedAt - triedAt);
}

const quantile = (xs: number[], q: number): number => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
};
const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;

const dir = await mkdtemp(join(tmpdir(), 'ledger-latency-'));
await chmod(dir, 0o711);
const server = await startLedgerPostgres({ dataDir: join(dir, 'pg'), logFilePath: join(dir, 'pg.log') });
const pools: LedgerPool[] = [];
try {
  const admin = new pg.Client({ connectionString: server.databaseUrl });
  // A migration may end other sessions; the next statement then says so.
  admin.on('error', (error: Error) => console.error(`admin connection: ${error.message}`));
  await admin.connect();
  const urlOf = (db: string): string => {
    const url = new URL(server.databaseUrl);
    url.pathname = `/${db}`;
    return url.toString();
  };
  const dbs: { name: string; db: string }[] = [];
  for (let i = 0; i < bases.length; i++) {
    await admin.query(`CREATE DATABASE ab_${i}`);
    await migrateFrom(urlOf(`ab_${i}`), await extractBase(bases[i]!, join(dir, `rev-${i}`)));
    dbs.push({ name: bases[i]!, db: `ab_${i}` });
  }
  await admin.query('CREATE DATABASE ab_head');
  await migrateLedger(urlOf('ab_head'));
  dbs.push({ name: 'working tree', db: 'ab_head' });
  for (const [i, name] of variantNames.entries()) {
    await admin.query(`CREATE DATABASE ab_v${i}`);
    await migrateLedger(urlOf(`ab_v${i}`));
    const client = new pg.Client({ connectionString: urlOf(`ab_v${i}`) });
    await client.connect();
    try {
      await client.query(variants[name]!);
    } catch (error) {
      throw new Error(`variant ${name}: ${(error as Error).message}`);
    } finally {
      await client.end();
    }
    dbs.push({ name: `working tree, ${name}`, db: `ab_v${i}` });
  }
  const sides: Side[] = [];
  for (const { name, db } of dbs) {
    const pool = createLedgerPool({ databaseUrl: urlOf(db), maxConnections: 2 });
    pools.push(pool);
    sides.push(await prepare(name, pool));
  }
  for (let i = 0; i < warmupPairs; i++) for (const side of sides) await onePair(side, false);
  for (let i = 0; i < pairs; i++) {
    // Rotate the order so no side always follows the same one.
    for (let j = 0; j < sides.length; j++) await onePair(sides[(i + j) % sides.length]!, true);
  }
  await admin.end().catch(() => undefined);
  const sizes = await Promise.all(sides.map((side) =>
    side.pool.query<{ bytes: string }>(`SELECT pg_relation_size('events')::text AS bytes`).then((r) => r.rows[0]!.bytes, () => '?')));
  const base = sides[0]!;
  console.log(`events heap bytes per side: ${sides.map((side, i) => `${side.name} ${sizes[i]}`).join(', ')}`);
  console.log(`\nOne caller, Try then Confirm, ${pairs} pairs per side, interleaved\n`);
  console.log('| side | pair p50 | pair mean | pair p90 | Try p50 | Confirm p50 | p50 − first commit\'s |');
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  for (const side of sides) {
    const p50 = quantile(side.pairMs, 0.5);
    console.log(
      `| ${side.name} | ${p50.toFixed(3)} ms | ${mean(side.pairMs).toFixed(3)} ms | ${quantile(side.pairMs, 0.9).toFixed(3)} ms | ` +
        `${quantile(side.tryMs, 0.5).toFixed(3)} ms | ${quantile(side.confirmMs, 0.5).toFixed(3)} ms | ` +
        `${side === base ? '' : `${(p50 - quantile(base.pairMs, 0.5)) >= 0 ? '+' : ''}${(p50 - quantile(base.pairMs, 0.5)).toFixed(3)} ms`} |`,
    );
  }
} finally {
  await Promise.all(pools.map((pool) => pool.end()));
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
