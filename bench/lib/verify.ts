import { checkLedgerInvariants } from '../../src/ledger/invariants.js';
import { analyzeLedger } from '../../src/ledger/maintenance.js';
import type { LedgerPool } from '../../src/ledger/pool.js';
import { captureTotals } from '../../src/ledger/reports.js';

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
  await analyzeLedger(pool);
  const startedAtMs = performance.now();
  const checks = await checkLedgerInvariants(pool, tenant);
  const checkDurationMs = performance.now() - startedAtMs;
  const brokenInvariants = Object.fromEntries(checks.filter((c) => c.violations > 0).map((c) => [c.name, c.violations]));
  const totals = await captureTotals(pool, tenant);
  const problems: string[] = [];
  if (checks.length === 0) problems.push('no invariant was checked');
  for (const [name, count] of Object.entries(brokenInvariants)) problems.push(`invariant ${name}: ${count} violations`);
  if (totals.keysCapturedMoreThanOnce > 0) problems.push(`${totals.keysCapturedMoreThanOnce} keys debited more than once`);
  if (totals.captureTransfers !== totals.confirmedRows) {
    problems.push(`${totals.captureTransfers} capture transfers for ${totals.confirmedRows} confirmed charges`);
  }
  if (totals.confirmedRows !== succeededByCallers) {
    problems.push(`callers saw ${succeededByCallers} charges succeed, the ledger confirmed ${totals.confirmedRows}`);
  }
  return {
    ok: problems.length === 0,
    checkDurationMs,
    brokenInvariants,
    chargeRows: totals.chargeRows,
    confirmedRows: totals.confirmedRows,
    captureTransfers: totals.captureTransfers,
    succeededByCallers,
    keysDebitedMoreThanOnce: totals.keysCapturedMoreThanOnce,
    problems,
  };
}
