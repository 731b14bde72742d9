import { checkLedgerInvariants } from '../../src/ledger/invariants.js';
import type { LedgerPool } from '../../src/ledger/pool.js';

/** A scenario's correctness at its end: a fast wrong run is a failed run. */
export interface Verification {
  ok: boolean;
  /** How long the invariant queries took: reconcile's cost at this ledger size. */
  checkDurationMs: number;
  /** Invariant name → violations, only those that failed. */
  brokenInvariants: Record<string, number>;
  chargeRows: number;
  confirmedRows: number;
  captureTransfers: number;
  /** Charges whose callers were told "succeeded". */
  succeededByCallers: number;
  /** Keys with more than one capture: the number that must be zero. */
  keysDebitedMoreThanOnce: number;
  problems: string[];
}

/**
 * Every ledger invariant for the scenario's tenant, plus the count the callers saw against the
 * ledger: each key the callers were told succeeded has exactly one capture, and no key has two.
 */
export async function verifyScenario(pool: LedgerPool, tenant: string, succeededByCallers: number): Promise<Verification> {
  // The scenario's tenant is new since the last ANALYZE: with no statistics for it the planner picks
  // nested loops that make the invariant queries quadratic (tens of seconds for a few thousand
  // charges). Fresh statistics first; reconcile on a real ledger has the same exposure.
  await pool.query('ANALYZE accounts, charges, transfers, journal_entries');
  const startedAtMs = performance.now();
  const checks = await checkLedgerInvariants(pool, tenant);
  const checkDurationMs = performance.now() - startedAtMs;
  const brokenInvariants = Object.fromEntries(checks.filter((c) => c.violations > 0).map((c) => [c.name, c.violations]));
  const { rows } = await pool.query<{ charges: number; confirmed: number; captures: number; doubled: number }>(
    `SELECT (SELECT count(*)::int FROM charges WHERE tenant = $1) AS charges,
            (SELECT count(*)::int FROM charges WHERE tenant = $1 AND hold_state = 'CONFIRMED') AS confirmed,
            (SELECT count(*)::int FROM transfers WHERE tenant = $1 AND kind = 'capture') AS captures,
            (SELECT count(*)::int FROM (SELECT reference FROM transfers WHERE tenant = $1 AND kind = 'capture'
                                         GROUP BY reference HAVING count(*) > 1) d) AS doubled`,
    [tenant],
  );
  const row = rows[0]!;
  const problems: string[] = [];
  if (checks.length === 0) problems.push('no invariant was checked');
  for (const [name, count] of Object.entries(brokenInvariants)) problems.push(`invariant ${name}: ${count} violations`);
  if (row.doubled > 0) problems.push(`${row.doubled} keys debited more than once`);
  if (row.captures !== row.confirmed) problems.push(`${row.captures} capture transfers for ${row.confirmed} confirmed charges`);
  if (row.confirmed !== succeededByCallers) {
    problems.push(`callers saw ${succeededByCallers} charges succeed, the ledger confirmed ${row.confirmed}`);
  }
  return {
    ok: problems.length === 0,
    checkDurationMs,
    brokenInvariants,
    chargeRows: row.charges,
    confirmedRows: row.confirmed,
    captureTransfers: row.captures,
    succeededByCallers,
    keysDebitedMoreThanOnce: row.doubled,
    problems,
  };
}
