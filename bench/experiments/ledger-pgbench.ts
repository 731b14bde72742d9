/**
 * What does each piece of the ledger's write path cost PostgreSQL? Not part of `npm run bench`: run
 * it with `npx tsx bench/experiments/ledger-pgbench.ts [phase-seconds]` on a quiet machine. The
 * Try+Confirm pair is driven by pgbench itself (a C client, as the TPC-B baseline is), so the
 * driver's CPU is out of the picture and what remains is the server's. One fresh embedded
 * PostgreSQL holds one database per variant: today's schema, and today's schema with one piece
 * taken out (a DDL statement below). These are measurements of what a piece costs, not candidate
 * schemas: taking a check out is only a change once a cheaper invariant stands in for it. The
 * phases run TPC-B, then every variant, then every variant in reverse, then TPC-B, at 8 callers.
 */
import { spawn } from 'node:child_process';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { createLedgerPool, type LedgerPool } from '../../src/ledger/pool.js';
import { confirmHold, tryHold } from '../../src/ledger/charges.js';
import { openPopulation } from '../lib/population.js';
import { runBounded } from '../lib/load.js';
import { withCpu } from '../lib/cpu.js';
import { ledgerIntent } from '../scenarios/ledger-only.js';
import { initTpcb, runPgbench } from '../scenarios/tpcb.js';
import { startLedgerPostgres } from '../../src/runtime/local-stack.js';

const phaseS = Number(process.argv[2] ?? 8);
const concurrency = Number(process.env.N ?? 8);

const allVariants: Record<string, string[]> = {
  today: [],
  'no journal foreign keys': [
    'ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_transfer_id_fkey',
    'ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_tenant_account_id_fkey',
  ],
  'no deferred balance check': ['DROP TRIGGER journal_entries_balanced ON journal_entries'],
  'no open-holds trigger': ['DROP TRIGGER charges_open_hold_inserted ON charges', 'DROP TRIGGER charges_open_hold_changed ON charges'],
  'no secondary charge indexes': ['DROP INDEX charges_by_order', 'DROP INDEX charges_by_payer', 'DROP INDEX charges_by_tenant_created'],
  'none of the three': [
    'ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_transfer_id_fkey',
    'ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_tenant_account_id_fkey',
    'DROP TRIGGER journal_entries_balanced ON journal_entries',
    'DROP TRIGGER charges_open_hold_inserted ON charges',
    'DROP TRIGGER charges_open_hold_changed ON charges',
  ],
};

// VARIANTS=name,name runs only those (and today).
const variants = Object.fromEntries(
  Object.entries(allVariants).filter(([name]) => name === 'today' || !process.env.VARIANTS || process.env.VARIANTS.split(',').includes(name)),
);

const pairScript = `\\set k random(1, 2000000000)
\\set p random(0, 1999)
\\set q random(0, 199)
SELECT 1 FROM ledger_try('x', 'k' || :k || '-' || :client_id, 'ch_' || :k || '-' || :client_id, repeat('a', 64), 'o', 'payer-' || lpad(:p::text, 5, '0'), 'payee-' || lpad(:q::text, 5, '0'), 'USD', 100, 'automatic', NULL, NULL, 1000, NULL, NULL);
SELECT 1 FROM ledger_confirm('x', 'k' || :k || '-' || :client_id, NULL);
`;

function pgbenchScript(databaseUrl: string, scriptPath: string): Promise<number> {
  const url = new URL(databaseUrl);
  const env = {
    ...process.env,
    PGHOST: url.hostname,
    PGPORT: url.port,
    PGUSER: decodeURIComponent(url.username),
    PGPASSWORD: decodeURIComponent(url.password),
    PGDATABASE: url.pathname.slice(1),
  };
  const args = ['-n', '-M', 'prepared', '-f', scriptPath, '-c', String(concurrency), '-j', '2', '-T', String(phaseS)];
  return new Promise((resolve, reject) => {
    const child = spawn('pgbench', args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let text = '';
    child.stdout.on('data', (chunk: Buffer) => (text += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (text += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => {
      const tps = Number(/tps = ([\d.]+) \(without initial connection time\)/.exec(text)?.[1]);
      if (code === 0 && Number.isFinite(tps)) resolve(tps);
      else reject(new Error(`pgbench exited with ${code}: ${text.slice(-800)}`));
    });
  });
}

const dir = await mkdtemp(join(tmpdir(), 'ledger-pgbench-'));
await chmod(dir, 0o711);
const server = await startLedgerPostgres({ dataDir: join(dir, 'pg'), logFilePath: join(dir, 'pg.log') });
const pools: LedgerPool[] = [];
try {
  const scriptPath = join(dir, 'pair.sql');
  await writeFile(scriptPath, pairScript);
  const urlOf = (db: string): string => {
    const url = new URL(server.databaseUrl);
    url.pathname = `/${db}`;
    return url.toString();
  };
  const names = Object.keys(variants);
  const admin = new pg.Client({ connectionString: server.databaseUrl });
  await admin.connect();
  for (let i = 0; i < names.length; i++) await admin.query(`CREATE DATABASE v${i}`);
  await admin.query('CREATE DATABASE tpcb');
  await admin.end();
  await initTpcb(urlOf('tpcb'), 32);
  for (let i = 0; i < names.length; i++) {
    await migrateLedger(urlOf(`v${i}`));
    const pool = createLedgerPool({ databaseUrl: urlOf(`v${i}`), maxConnections: 8 });
    pools.push(pool);
    for (const ddl of variants[names[i]!]!) await pool.query(ddl);
    const hist = await openPopulation(pool, { tenant: 'hist', payers: 200, payees: 20 });
    await runBounded(3000, 8, async (n) => {
      await tryHold(pool, ledgerIntent('hist', `h-${n}`, hist.payers[n % 200]!, hist.payees[n % 20]!), 1000);
      await confirmHold(pool, 'hist', `h-${n}`, null);
    });
    await openPopulation(pool, { tenant: 'x', payers: 2000, payees: 200 });
    await pool.query('ANALYZE');
  }
  const { rows } = await pools[0]!.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  const stat = readFileSync(`/proc/${rows[0]!.pid}/stat`, 'utf8');
  const postmaster = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);

  const results = new Map<string, { perSecond: number[]; cpuMs: number[] }>();
  const record = (name: string, perSecond: number, cpuPercent: number): void => {
    const entry = results.get(name) ?? { perSecond: [], cpuMs: [] };
    entry.perSecond.push(perSecond);
    entry.cpuMs.push((cpuPercent / 100 / perSecond) * 1000);
    results.set(name, entry);
    console.log(`${name}: ${perSecond.toFixed(0)}/s, PostgreSQL ${cpuPercent}% of a core`);
  };
  const order = ['TPC-B', ...names.map((_, i) => i), ...names.map((_, i) => i).reverse(), 'TPC-B'];
  for (const step of order) {
    const { value, cpuPercent } = await withCpu({ temporal: null, postgres: postmaster, worker: null }, () =>
      step === 'TPC-B'
        ? runPgbench(urlOf('tpcb'), { label: 'TPC-B', concurrency, durationMs: phaseS * 1000 }).then((r) => r.operationsPerSecond)
        : pgbenchScript(urlOf(`v${step}`), scriptPath),
    );
    record(step === 'TPC-B' ? 'TPC-B' : names[step as number]!, value, cpuPercent.postgres!);
  }
  const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
  const tpcb = mean(results.get('TPC-B')!.perSecond);
  console.log(`\n| variant (N=${concurrency}, pgbench as the client) | per second | ÷ TPC-B | PostgreSQL CPU ms per op |\n|---|---:|---:|---:|`);
  for (const [name, entry] of results) {
    console.log(`| ${name} | ${mean(entry.perSecond).toFixed(0)} | ${(mean(entry.perSecond) / tpcb).toFixed(2)} | ${mean(entry.cpuMs).toFixed(3)} |`);
  }
} finally {
  await Promise.all(pools.map((pool) => pool.end()));
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
