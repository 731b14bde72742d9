import type { Charge, ChargeStatus } from '../domain/charge.js';
import { fromRow, type ChargeRow } from './charges.js';
import type { LedgerPool } from './pool.js';

/**
 * Finding charges for an operator ("what happened to order X"). The ledger is the index: it keeps
 * every key forever, while Temporal's visibility forgets closed workflows after the retention period.
 * A charge appears here once its Try (or a cancel before it) has run, milliseconds after its start.
 */
export interface ChargeFilter {
  orderId?: string | null;
  payerAccountId?: string | null;
  status?: ChargeStatus | null;
  /** Page size; the caller bounds it. */
  limit: number;
  /** Idempotency key of the last charge of the previous page (newest first). */
  startingAfter?: string | null;
}

export interface ChargePage {
  charges: Charge[];
  hasMore: boolean;
}

/** Newest first, keyset-paginated on (created_at, idempotency_key) so pages stay stable under inserts. */
export async function listCharges(pool: LedgerPool, tenant: string, filter: ChargeFilter): Promise<ChargePage> {
  const conditions = ['tenant = $1'];
  const params: unknown[] = [tenant];
  const param = (value: unknown): string => {
    params.push(value);
    return `$${params.length}`;
  };
  if (filter.orderId != null) conditions.push(`order_id = ${param(filter.orderId)}`);
  if (filter.payerAccountId != null) conditions.push(`payer_account_id = ${param(filter.payerAccountId)}`);
  // The view's status, so listing and reconcile cannot disagree on what a status means.
  if (filter.status != null) conditions.push(`status = ${param(filter.status)}`);
  if (filter.startingAfter != null) {
    // An unknown cursor yields an empty page rather than silently restarting from the top.
    conditions.push(
      `(created_at, idempotency_key) < (SELECT created_at, idempotency_key FROM charges
                                         WHERE tenant = $1 AND idempotency_key = ${param(filter.startingAfter)})`,
    );
  }
  const limit = param(filter.limit + 1);
  const result = await pool.query<ChargeRow>(
    `SELECT * FROM charge_statuses WHERE ${conditions.join(' AND ')}
      ORDER BY created_at DESC, idempotency_key DESC LIMIT ${limit}`,
    params,
  );
  const rows = result.rows.slice(0, filter.limit);
  return { charges: rows.map((row) => fromRow(row).charge), hasMore: result.rows.length > filter.limit };
}
