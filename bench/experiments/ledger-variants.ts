/**
 * What would lift P2? Not part of `npm run bench`: run it with
 * `npx tsx bench/experiments/ledger-variants.ts [candidate-dir]` on a quiet machine. On one fresh
 * embedded PostgreSQL with a little history it alternates, at 8 and 32 callers, a candidate Try and
 * Confirm, today's Try+Confirm, the same with prepared statements, and a prototype of a one-step
 * capture for automatic charges (created here only, in this scratch database; its replay and
 * decline paths are not written). The candidate is ledger_try and ledger_confirm from
 * `candidate-dir`, a copy of the ledger's function sources (src/ledger/migrations/repeatable) with
 * the change to weigh; without it, today's sources, so the two rows show the run's own noise.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { ledgerFunctionSource } from '../../src/ledger/repeatable.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { openPopulation } from '../lib/population.js';
import { ledgerIntent } from '../scenarios/ledger-only.js';
import { tryHold, confirmHold } from '../../src/ledger/charges.js';
import { runBounded, runClosedLoop } from '../lib/load.js';
import { startLedgerPostgres } from '../../src/runtime/local-stack.js';

const oneStep = `
CREATE FUNCTION scratch_try_confirm(
  p_tenant text, p_key text, p_charge_id text, p_fingerprint text,
  p_order_id text, p_payer text, p_payee text, p_currency text, p_amount_minor bigint,
  p_capture_mode text, p_description text, p_metadata jsonb, p_hold_ttl_ms bigint
) RETURNS charges LANGUAGE plpgsql AS $$
DECLARE r charges; v_transfer_id bigint;
BEGIN
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, held_minor, captured_minor)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, p_payer, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'CONFIRMED', 0, p_amount_minor)
  ON CONFLICT DO NOTHING RETURNING * INTO r;
  IF NOT FOUND THEN RAISE EXCEPTION 'replay path not prototyped'; END IF;
  UPDATE accounts p SET posted_minor = p.posted_minor - p_amount_minor
    FROM accounts q
   WHERE p.tenant = p_tenant AND p.id = p_payer AND q.tenant = p_tenant AND q.id = p_payee
     AND p.currency = p_currency AND q.currency = p_currency AND NOT p.frozen AND NOT q.frozen
     AND (p.allow_overdraft OR p.posted_minor - p.pending_minor >= p_amount_minor);
  IF NOT FOUND THEN RAISE EXCEPTION 'decline path not prototyped'; END IF;
  INSERT INTO transfers (tenant, kind, reference, currency, amount_minor)
  VALUES (p_tenant, 'capture', p_key, p_currency, p_amount_minor) RETURNING id INTO v_transfer_id;
  WITH entries AS (
    INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES
      (v_transfer_id, p_tenant, p_payer, -p_amount_minor), (v_transfer_id, p_tenant, p_payee, p_amount_minor)
    RETURNING id, account_id, amount_minor)
  INSERT INTO pending_postings (tenant, account_id, entry_id, posted_delta_minor, pending_delta_minor)
  SELECT p_tenant, account_id, id, amount_minor, 0 FROM entries WHERE amount_minor > 0;
  RETURN r;
END $$;`;

const candidateDir = process.argv[2] === undefined ? undefined : resolve(process.argv[2]);

/** The function's source, installed under another name beside the real one. */
function renamedFunctionSql(name: string, newName: string): string {
  const { sql } = ledgerFunctionSource(name, candidateDir);
  const renamed = sql.replace(new RegExp(`CREATE (OR REPLACE )?FUNCTION ${name}\\(`), `CREATE FUNCTION ${newName}(`);
  if (renamed === sql) throw new Error(`the source of ${name} does not create ${name}`);
  return renamed;
}
const candidateFunctions = [
  renamedFunctionSql('ledger_try', 'candidate_ledger_try'),
  renamedFunctionSql('ledger_confirm', 'candidate_ledger_confirm'),
].join('\n');

const dir = await mkdtemp(join(tmpdir(), 'p2x-'));
await chmod(dir, 0o711);
const server = await startLedgerPostgres({ dataDir: join(dir, 'pg'), logFilePath: join(dir, 'pg.log') });
try {
  await migrateLedger(server.databaseUrl);
  const setup = new pg.Client({ connectionString: server.databaseUrl });
  await setup.connect();
  await setup.query(oneStep);
  await setup.query(candidateFunctions);
  await setup.end();
  const pool = createLedgerPool({ databaseUrl: server.databaseUrl, maxConnections: 32, statementTimeoutMs: 600_000 });
  const hist = await openPopulation(pool, { tenant: 'hist', payers: 200, payees: 20 });
  await runBounded(3000, 8, async (i) => { const k = `h-${i}`; await tryHold(pool, ledgerIntent('hist', k, hist.payers[i % 200]!, hist.payees[i % 20]!), 1000); await confirmHold(pool, 'hist', k, null); });
  await pool.query('ANALYZE');
  const pop = await openPopulation(pool, { tenant: 'x', payers: 2000, payees: 200 });
  const params = (key: string, i: number): unknown[] => {
    const it = ledgerIntent('x', key, pop.payers[i % 2000]!, pop.payees[i % 200]!);
    const r = it.request;
    return [it.tenant, it.idempotencyKey, it.chargeId, it.fingerprint, r.orderId, r.payerAccountId, r.payeeAccountId, r.currency, r.amountMinor, r.captureMode, null, null, 1000, null, null];
  };
  const variants: Record<string, (i: number) => Promise<void>> = {
    [`two steps, candidate (${candidateDir ?? 'today'})`]: async (i) => { const k = `o-${i}`; await pool.query('SELECT * FROM candidate_ledger_try($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15)', params(k, i)); await pool.query('SELECT * FROM candidate_ledger_confirm($1,$2,$3)', ['x', k, null]); },
    'two steps (today)': async (i) => { const k = `a-${i}`; await pool.query('SELECT * FROM ledger_try($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15)', params(k, i)); await pool.query('SELECT * FROM ledger_confirm($1,$2,$3)', ['x', k, null]); },
    'two steps, prepared': async (i) => { const k = `b-${i}`; await pool.query({ name: 'try', text: 'SELECT * FROM ledger_try($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15)', values: params(k, i) }); await pool.query({ name: 'confirm', text: 'SELECT * FROM ledger_confirm($1,$2,$3)', values: ['x', k, null] }); },
    'one step (prototype), prepared': async (i) => { const k = `c-${i}`; await pool.query({ name: 'one', text: 'SELECT * FROM scratch_try_confirm($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)', values: params(k, i).slice(0, 13) }); },
  };
  for (const concurrency of [8, 32, 8, 32]) {
    for (const [name, op] of Object.entries(variants)) {
      let seq = Math.floor(performance.now() * 1000);
      const r = await runClosedLoop({ label: `${name} N=${concurrency}`, concurrency, warmupMs: 2_000, durationMs: 8_000, maxOperations: 1_000_000, operation: () => op(seq++) });
      console.log(`RESULT ${name} N=${concurrency}: ${r.operationsPerSecond.toFixed(0)} charges/s, p50 ${r.latency.p50Ms.toFixed(1)} ms, failed ${r.failed} ${r.failureSamples[0] ?? ''}`);
    }
  }
  await pool.end();
} finally {
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
