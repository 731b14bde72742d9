/**
 * How long `reconcile` (the ledger and authority checks; no Temporal) takes on a large ledger whose
 * tables the planner has no statistics for: the state after a PostgreSQL crash (the cumulative
 * statistics are discarded, so autovacuum does not know the tables changed and never analyzes
 * them) or after a bulk load. Not part of `npm run bench`: run it with
 * `npx tsx bench/experiments/reconcile-large-ledger.ts [charges] [--stale]` (default 1,000,000).
 *
 * A fresh embedded PostgreSQL holds one migrated ledger, filled directly in SQL (generate_series)
 * with autovacuum off on every table, so nothing is analyzed behind the bench's back:
 * - 10 tenants, each with 1,000 payers, 100 payees, its deposit and provider clearing accounts and
 *   5 agent keys;
 * - `charges` rows: 80 % CONFIRMED (a capture transfer, 2 journal entries each), 8 % CANCELLED,
 *   5 % DECLINED, 2 % TRIED within their hold, 5 % CONFIRMED card charges captured through the
 *   provider clearing account; one refund for every 20th confirmed ledger charge;
 * - one deposit per payer, so every balance is consistent and the checks should all pass;
 * - each charge's event (the outbox): what the ledger's steps or its triggers would have written.
 * With `--stale`, every table is analyzed while it is small (1 % of the rows) and then filled: the
 * statistics describe a ledger a hundred times smaller, as after a crash early in a long run.
 *
 * It then runs `reconcile` with a statement limit of `RECONCILE_BENCH_LIMIT_S` (default 600 s)
 * and prints each check's time (from the report when the checks carry `durationMs`, else each
 * statement's time as the pool saw it), so the same script measures before and after a change.
 *
 * With `--keep <dir>` the database lives in `<dir>` and is kept: the first run fills it, later runs
 * (of this or another version of the code) reconcile the same ledger without filling it again, so
 * a before/after comparison reads the very same rows. Delete the folder when done.
 */
import { access, chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { createLedgerPool, type LedgerPool } from '../../src/ledger/pool.js';
import { reconcile, type ReconcileReport } from '../../src/reconcile/index.js';
import { startLedgerPostgres } from '../../src/runtime/local-stack.js';

const charges = Number(process.argv.find((arg) => /^\d+$/.test(arg)) ?? 1_000_000);
const stale = process.argv.includes('--stale');
const limitMs = Number(process.env.RECONCILE_BENCH_LIMIT_S ?? 600) * 1000;
const keepIndex = process.argv.indexOf('--keep');
const keepDir = keepIndex >= 0 ? process.argv[keepIndex + 1] : undefined;
if (keepIndex >= 0 && !keepDir) throw new Error('--keep needs a folder');
const tenants = 10;
const payersPerTenant = 1_000;
const payeesPerTenant = 100;
const keysPerTenant = 5;

const tables = ['accounts', 'api_keys', 'charges', 'transfers', 'journal_entries', 'refunds', 'pending_postings'];

/**
 * The ledger for `n` charges, in SQL. Charge i belongs to tenant i % 10, is made by one of its
 * keys, and was created i seconds before a fixed instant spread over the last ~12 days. Its kind is
 * i % 100: 0-79 confirmed ledger charges, 80-87 cancelled, 88-92 declined, 93-94 held, 95-99
 * confirmed card charges. `from`/`to` bound i so the same statements can fill in steps.
 */
function fillStatements(from: number, to: number): string[] {
  const range = `generate_series(${from}, ${to - 1}) AS i`;
  const tenant = `'t' || (i % ${tenants})`;
  const kind = `(i % 100)`;
  const payer = `CASE WHEN ${kind} >= 95 THEN '@provider/stripe/USD' ELSE 'payer-' || ((i / ${tenants}) % ${payersPerTenant}) END`;
  const payee = `'payee-' || ((i / ${tenants}) % ${payeesPerTenant})`;
  const amount = `(100 + i % 900)`;
  const createdAt = `(timestamptz '2026-11-20 00:00:00+00' - i * interval '1 second' / ${Math.max(1, Math.round(charges / 1_000_000))})`;
  return [
    `INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id, payee_account_id, currency,
                          amount_minor, capture_mode, hold_state, held_minor, captured_minor, refunded_minor, decline_code,
                          hold_expires_at, created_at, updated_at, created_by_key_id,
                          provider, payment_method, provider_payment_id, provider_state)
     SELECT ${tenant}, 'k-' || i, 'ch_' || i, md5(i::text) || md5('x' || i), 'o-' || i, ${payer}, ${payee}, 'USD',
            ${amount}, 'automatic',
            CASE WHEN ${kind} < 80 OR ${kind} >= 95 THEN 'CONFIRMED' WHEN ${kind} < 88 THEN 'CANCELLED'
                 WHEN ${kind} < 93 THEN 'DECLINED' ELSE 'TRIED' END,
            CASE WHEN ${kind} BETWEEN 93 AND 94 THEN ${amount} ELSE 0 END,
            CASE WHEN ${kind} < 80 OR ${kind} >= 95 THEN ${amount} ELSE 0 END,
            CASE WHEN ${kind} < 80 AND i % 20 = 0 THEN 50 ELSE 0 END,
            CASE WHEN ${kind} BETWEEN 88 AND 92 THEN 'insufficient_funds' END,
            CASE WHEN ${kind} BETWEEN 93 AND 94 THEN now() + interval '1 day' END,
            ${createdAt}, ${createdAt}, 'key-' || (i % ${tenants}) || '-' || ((i / ${tenants}) % ${keysPerTenant}),
            CASE WHEN ${kind} >= 95 THEN 'stripe' END, CASE WHEN ${kind} >= 95 THEN 'pm_card_visa' END,
            CASE WHEN ${kind} >= 95 THEN 'pi_' || i END, CASE WHEN ${kind} >= 95 THEN 'captured' END
       FROM ${range}`,
    // A ledger charge's event is written by the ledger's steps, which this fill bypasses: the event
    // of the status each charge stands in (a card charge's comes from its trigger).
    `INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data, created_at)
     SELECT ledger_event_id(), ${tenant},
            'charge.' || CASE WHEN ${kind} < 80 THEN 'succeeded' WHEN ${kind} < 88 THEN 'cancelled'
                              WHEN ${kind} < 93 THEN 'declined' ELSE 'reserved' END,
            'charge', 'ch_' || i, 1, jsonb_build_object('object', jsonb_build_object('id', 'ch_' || i)), ${createdAt}
       FROM ${range} WHERE ${kind} < 95`,
    `INSERT INTO transfers (id, tenant, kind, reference, currency, amount_minor, created_at, created_by_key_id)
     SELECT 1000000000 + i, ${tenant}, 'capture', 'k-' || i, 'USD', ${amount}, ${createdAt}, NULL
       FROM ${range} WHERE ${kind} < 80 OR ${kind} >= 95`,
    `INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor, created_at)
     SELECT 1000000000 + i, ${tenant}, side.account, side.sign * ${amount}, ${createdAt}
       FROM ${range}
      CROSS JOIN LATERAL (VALUES (${payer}, -1), (${payee}, 1)) AS side(account, sign)
      WHERE ${kind} < 80 OR ${kind} >= 95`,
    `INSERT INTO transfers (id, tenant, kind, reference, currency, amount_minor, created_at, created_by_key_id)
     SELECT 2000000000 + i, ${tenant}, 'refund', ledger_refund_reference('k-' || i, 'r'), 'USD', 50, ${createdAt}, NULL
       FROM ${range} WHERE ${kind} < 80 AND i % 20 = 0`,
    `INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor, created_at)
     SELECT 2000000000 + i, ${tenant}, side.account, side.sign * 50, ${createdAt}
       FROM ${range}
      CROSS JOIN LATERAL (VALUES (${payee}, -1), (${payer}, 1)) AS side(account, sign)
      WHERE ${kind} < 80 AND i % 20 = 0`,
    `INSERT INTO refunds (tenant, charge_key, refund_key, id, charge_id, currency, fingerprint, amount_minor, status, transfer_id,
                          created_at, created_by_key_id)
     SELECT ${tenant}, 'k-' || i, 'r', 're_' || i, 'ch_' || i, 'USD', md5('r' || i) || md5('y' || i), 50, 'succeeded',
            2000000000 + i, ${createdAt}, 'key-' || (i % ${tenants}) || '-' || ((i / ${tenants}) % ${keysPerTenant})
       FROM ${range} WHERE ${kind} < 80 AND i % 20 = 0`,
  ];
}

/** Tenants, their accounts and keys, and one deposit per payer (made large enough for every charge). */
const setupStatements = [
  `INSERT INTO api_keys (id, tenant, key_hash, key_prefix, role, created_at, currency)
   SELECT 'key-' || t || '-' || k, 't' || t, encode(sha256(('key-' || t || '-' || k)::bytea), 'hex'), 'cg_', 'agent',
          timestamptz '2020-01-01 00:00:00+00', 'USD'
     FROM generate_series(0, ${tenants - 1}) t, generate_series(0, ${keysPerTenant - 1}) k`,
  `INSERT INTO accounts (tenant, id, currency, allow_overdraft, is_system, created_at)
   SELECT 't' || t, a.id, 'USD', a.system, a.system, timestamptz '2020-01-01 00:00:00+00'
     FROM generate_series(0, ${tenants - 1}) t
    CROSS JOIN LATERAL (
      SELECT 'payer-' || p AS id, false AS system FROM generate_series(0, ${payersPerTenant - 1}) p
      UNION ALL SELECT 'payee-' || p, false FROM generate_series(0, ${payeesPerTenant - 1}) p
      UNION ALL VALUES ('@external/USD', true), ('@provider/stripe/USD', true)) a`,
  `INSERT INTO transfers (id, tenant, kind, reference, currency, amount_minor, created_at)
   SELECT t * 100000 + p + 1, 't' || t, 'deposit', 'dep-' || p, 'USD', 1000000000, timestamptz '2020-01-01 00:00:00+00'
     FROM generate_series(0, ${tenants - 1}) t, generate_series(0, ${payersPerTenant - 1}) p`,
  `INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor, created_at)
   SELECT t * 100000 + p + 1, 't' || t, side.account, side.amount, timestamptz '2020-01-01 00:00:00+00'
     FROM generate_series(0, ${tenants - 1}) t, generate_series(0, ${payersPerTenant - 1}) p
    CROSS JOIN LATERAL (VALUES ('@external/USD', -1000000000::bigint), ('payer-' || p, 1000000000::bigint)) AS side(account, amount)`,
];

/** Balances as the journal and the holds have them (what the ledger's steps would have kept). */
const balanceStatements = [
  `UPDATE accounts a SET posted_minor = j.sum_minor
     FROM (SELECT tenant, account_id, sum(amount_minor) AS sum_minor FROM journal_entries GROUP BY tenant, account_id) j
    WHERE j.tenant = a.tenant AND j.account_id = a.id`,
  `UPDATE accounts a SET pending_minor = h.held_minor
     FROM (SELECT tenant, payer_account_id, sum(held_minor) AS held_minor FROM charges WHERE hold_state = 'TRIED'
            GROUP BY tenant, payer_account_id) h
    WHERE h.tenant = a.tenant AND h.payer_account_id = a.id`,
];

interface Timed {
  label: string;
  ms: number;
}

/** Times every statement the pool's clients run (pool.query checks a client out too), in place. */
function timeStatements(pool: LedgerPool, timings: Timed[]): void {
  const patched = new WeakSet<object>();
  const labelOf = (sql: unknown): string =>
    String(typeof sql === 'string' ? sql : ((sql as { text?: string }).text ?? ''))
      .replace(/\s+/g, ' ')
      .slice(0, 90);
  const record = (sql: unknown, started: number): void => {
    const label = labelOf(sql);
    if (!/^(BEGIN|COMMIT|ROLLBACK|SET |SELECT set_config)/i.test(label)) timings.push({ label, ms: performance.now() - started });
  };
  pool.on('acquire', (client) => {
    if (patched.has(client)) return;
    patched.add(client);
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: unknown }).query = (...args: unknown[]): unknown => {
      const started = performance.now();
      const last = args[args.length - 1];
      if (typeof last === 'function') {
        args[args.length - 1] = (...result: unknown[]) => {
          record(args[0], started);
          (last as (...r: unknown[]) => void)(...result);
        };
        return query(...args);
      }
      const answer = query(...args);
      if (answer instanceof Promise) return answer.finally(() => record(args[0], started));
      return answer;
    };
  });
}

const seconds = (ms: number): string => `${(ms / 1000).toFixed(2)} s`;

const dir = keepDir ?? (await mkdtemp(join(tmpdir(), 'reconcile-large-')));
await mkdir(dir, { recursive: true });
await chmod(dir, 0o711);
const loadedMarker = join(dir, 'loaded');
const alreadyLoaded = keepDir !== undefined && (await access(loadedMarker).then(() => true, () => false));
const server = await startLedgerPostgres({ dataDir: join(dir, 'pg'), logFilePath: join(dir, 'pg.log') });
let pool: LedgerPool | undefined;
try {
  const url = new URL(server.databaseUrl);
  url.pathname = '/big';
  let loadedIn = 'kept from an earlier run';
  if (!alreadyLoaded) {
    const admin = new pg.Client({ connectionString: server.databaseUrl });
    await admin.connect();
    await admin.query('DROP DATABASE IF EXISTS big');
    await admin.query('CREATE DATABASE big');
    await admin.end();
    await migrateLedger(url.toString());
  }
  const loader = new pg.Client({ connectionString: url.toString() });
  await loader.connect();
  await loader.query('SET statement_timeout = 0');
  if (!alreadyLoaded) {
    for (const table of tables) await loader.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
    // Bulk rows, not the ledger's steps: the append-only journal's statement check is left on.
    const loadStarted = performance.now();
    // One transaction: a deposit's event (a deferred trigger) reads its journal entries at commit.
    await loader.query('BEGIN');
    for (const sql of setupStatements) await loader.query(sql);
    await loader.query('COMMIT');
    const step = 250_000;
    const small = Math.max(1, Math.floor(charges / 100));
    let filled = 0;
    if (stale) {
      for (const sql of fillStatements(0, small)) await loader.query(sql);
      for (const table of tables) await loader.query(`ANALYZE ${table}`);
      filled = small;
    }
    for (let from = filled; from < charges; from += step) {
      for (const sql of fillStatements(from, Math.min(charges, from + step))) await loader.query(sql);
      process.stderr.write(`filled ${Math.min(charges, from + step)} of ${charges} charges\n`);
    }
    for (const sql of balanceStatements) await loader.query(sql);
    loadedIn = seconds(performance.now() - loadStarted);
    if (keepDir !== undefined) await writeFile(loadedMarker, `${charges}${stale ? ' --stale' : ''}\n`);
  }
  const analyzed = await loader.query<{ relname: string; last_analyze: Date | null; n: string }>(
    `SELECT c.relname, s.last_analyze, (SELECT count(*) FROM pg_statistic WHERE starelid = c.oid) AS n
       FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.relname = ANY($1) ORDER BY c.relname`,
    [tables],
  );
  const sizes = await loader.query<{ relname: string; rows: string }>(
    `SELECT 'charges' AS relname, count(*) AS rows FROM charges UNION ALL SELECT 'transfers', count(*) FROM transfers
     UNION ALL SELECT 'journal_entries', count(*) FROM journal_entries UNION ALL SELECT 'refunds', count(*) FROM refunds
     UNION ALL SELECT 'accounts', count(*) FROM accounts`,
  );
  await loader.end();
  console.log(`# reconcile on a large ledger${stale ? ' (statistics of a ledger 100x smaller)' : ' (never analyzed)'}`);
  console.log(`loaded in ${loadedIn}: ${sizes.rows.map((r) => `${r.relname} ${Number(r.rows).toLocaleString('en-US')}`).join(', ')}`);
  console.log(`statistics: ${analyzed.rows.map((r) => `${r.relname} ${r.n} columns${r.last_analyze ? ' (analyzed small)' : ''}`).join(', ')}`);

  const timings: Timed[] = [];
  pool = createLedgerPool({ databaseUrl: url.toString(), maxConnections: 4, statementTimeoutMs: limitMs });
  const started = performance.now();
  let report: ReconcileReport | undefined;
  try {
    timeStatements(pool, timings);
    report = await reconcile({ ledger: pool, temporal: null, reconcileStatementTimeoutMs: limitMs } as Parameters<typeof reconcile>[0]);
  } catch (error) {
    console.log(`reconcile FAILED after ${seconds(performance.now() - started)}: ${(error as Error).message}`);
  }
  if (report) {
    console.log(`reconcile ${report.ok ? 'OK' : 'FAILED'} in ${seconds(performance.now() - started)}; violations ${report.violations}`);
    console.log('');
    console.log('| check | s |');
    console.log('|---|---|');
    for (const check of report.checks) {
      const ms = (check as { durationMs?: number }).durationMs;
      console.log(`| ${check.name}${check.violations ? ` (${check.violations} violations)` : ''} | ${ms === undefined ? '-' : (ms / 1000).toFixed(2)} |`);
    }
  }
  console.log('');
  console.log('| statement | s in all | longest one, s |');
  console.log('|---|---|---|');
  const byLabel = new Map<string, { ms: number; n: number; max: number }>();
  for (const t of timings) {
    const seen = byLabel.get(t.label) ?? { ms: 0, n: 0, max: 0 };
    byLabel.set(t.label, { ms: seen.ms + t.ms, n: seen.n + 1, max: Math.max(seen.max, t.ms) });
  }
  for (const [label, t] of byLabel) {
    console.log(`| ${label.replace(/\|/g, '/')}${t.n > 1 ? ` (×${t.n})` : ''} | ${(t.ms / 1000).toFixed(2)} | ${(t.max / 1000).toFixed(2)} |`);
  }
  const longest = timings.reduce((a, b) => (b.ms > a.ms ? b : a), { label: 'none', ms: 0 });
  console.log(`\nlongest statement: ${(longest.ms / 1000).toFixed(2)} s (${longest.label})`);
} finally {
  await pool?.end();
  await server.stop();
  if (keepDir === undefined) await rm(dir, { recursive: true, force: true });
}
