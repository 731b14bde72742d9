import type { ChargeStatus } from '../domain/charge.js';
import type { Queryable } from './keyset.js';
import type { LedgerPool } from './pool.js';

/** What the ledger holds, for one tenant or (tenant null) all of them: reconcile's totals. */
export interface LedgerCounts {
  /** Accounts the tenants opened (the external system accounts left out). */
  accounts: number;
  charges: number;
  chargesByStatus: Partial<Record<ChargeStatus, number>>;
  openHolds: number;
  heldMinor: number;
  capturedMinor: number;
  refunds: { succeeded: number; failed: number };
  refundedMinor: number;
  transfersByKind: Record<string, number>;
  journalEntries: number;
}

/** `pool` may be a client inside reconcile's snapshot (its statements then run one after another). */
export async function countLedger(pool: Queryable, tenant: string | null): Promise<LedgerCounts> {
  const scope = [tenant];
  // One after another: on a client a second query must not be sent while one runs.
  const [accounts, charges, refunds, transfers, entries] = await inTurn([
    () => pool.query<{ n: number }>(
      'SELECT count(*)::bigint AS n FROM accounts WHERE NOT is_system AND ($1::text IS NULL OR tenant = $1)',
      scope,
    ),
    () => pool.query<{ status: ChargeStatus; n: number; held_minor: number; captured_minor: number }>(
      `SELECT status, count(*)::bigint AS n, sum(held_minor)::bigint AS held_minor, sum(captured_minor)::bigint AS captured_minor
         FROM charge_statuses WHERE ($1::text IS NULL OR tenant = $1) GROUP BY status`,
      scope,
    ),
    () => pool.query<{ status: 'succeeded' | 'failed'; n: number; amount_minor: number }>(
      `SELECT status, count(*)::bigint AS n, sum(amount_minor)::bigint AS amount_minor FROM refunds
        WHERE ($1::text IS NULL OR tenant = $1) GROUP BY status`,
      scope,
    ),
    () => pool.query<{ kind: string; n: number }>(
      'SELECT kind, count(*)::bigint AS n FROM transfers WHERE ($1::text IS NULL OR tenant = $1) GROUP BY kind',
      scope,
    ),
    () => pool.query<{ n: number }>(
      'SELECT count(*)::bigint AS n FROM journal_entries WHERE ($1::text IS NULL OR tenant = $1)',
      scope,
    ),
  ] as const);
  const chargesByStatus: Partial<Record<ChargeStatus, number>> = {};
  let heldMinor = 0;
  let capturedMinor = 0;
  for (const row of charges.rows) {
    chargesByStatus[row.status] = row.n;
    heldMinor += row.held_minor;
    capturedMinor += row.captured_minor;
  }
  const refundCounts = { succeeded: 0, failed: 0 };
  let refundedMinor = 0;
  for (const row of refunds.rows) {
    refundCounts[row.status] = row.n;
    if (row.status === 'succeeded') refundedMinor = row.amount_minor;
  }
  return {
    accounts: accounts.rows[0]?.n ?? 0,
    charges: charges.rows.reduce((sum, row) => sum + row.n, 0),
    chargesByStatus,
    openHolds: chargesByStatus.reserved ?? 0,
    heldMinor,
    capturedMinor,
    refunds: refundCounts,
    refundedMinor,
    transfersByKind: Object.fromEntries(transfers.rows.map((row) => [row.kind, row.n])),
    journalEntries: entries.rows[0]?.n ?? 0,
  };
}

/** Runs each step after the one before, keeping the tuple's types. */
async function inTurn<T extends readonly (() => Promise<unknown>)[]>(steps: T): Promise<{ -readonly [K in keyof T]: Awaited<ReturnType<T[K]>> }> {
  const results: unknown[] = [];
  for (const step of steps) results.push(await step());
  return results as { -readonly [K in keyof T]: Awaited<ReturnType<T[K]>> };
}

/** One tenant's captures as the journal has them: what "exactly once" is checked against. */
export interface CaptureTotals {
  chargeRows: number;
  confirmedRows: number;
  captureTransfers: number;
  /** Keys with more than one capture transfer: the number that must be zero. */
  keysCapturedMoreThanOnce: number;
  /** What the capture transfers debited from payers, summed over their journal entries. */
  debitedMinor: number;
}

export async function captureTotals(pool: LedgerPool, tenant: string): Promise<CaptureTotals> {
  const { rows } = await pool.query<{ charges: number; confirmed: number; captures: number; doubled: number; debited_minor: number }>(
    `SELECT (SELECT count(*)::int FROM charges WHERE tenant = $1) AS charges,
            (SELECT count(*)::int FROM charges WHERE tenant = $1 AND hold_state = 'CONFIRMED') AS confirmed,
            (SELECT count(*)::int FROM transfers WHERE tenant = $1 AND kind = 'capture') AS captures,
            (SELECT count(*)::int FROM (SELECT reference FROM transfers WHERE tenant = $1 AND kind = 'capture'
                                         GROUP BY reference HAVING count(*) > 1) d) AS doubled,
            (SELECT coalesce(sum(-e.amount_minor), 0)::bigint FROM journal_entries e JOIN transfers t ON t.id = e.transfer_id
              WHERE t.tenant = $1 AND t.kind = 'capture' AND e.amount_minor < 0) AS debited_minor`,
    [tenant],
  );
  const row = rows[0]!;
  return {
    chargeRows: row.charges,
    confirmedRows: row.confirmed,
    captureTransfers: row.captures,
    keysCapturedMoreThanOnce: row.doubled,
    debitedMinor: row.debited_minor,
  };
}

/** How many of one tenant's charges are in each status (statuses without charges are absent). */
export async function countChargesByStatus(pool: LedgerPool, tenant: string): Promise<Partial<Record<ChargeStatus, number>>> {
  const { rows } = await pool.query<{ status: ChargeStatus; n: number }>(
    'SELECT status, count(*)::int AS n FROM charge_statuses WHERE tenant = $1 GROUP BY status',
    [tenant],
  );
  return Object.fromEntries(rows.map((row) => [row.status, row.n]));
}
