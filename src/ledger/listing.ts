import type { Charge, ChargeStatus } from '../domain/charge.js';
import { fromRow, type ChargeRow } from './charges.js';
import type { LedgerPool } from './pool.js';
import { keysetPage } from './pages.js';

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
  /** The page's cursor: a charge of the tenant by its idempotency key (findChargeCursor resolves ids). */
  page?: { direction: 'after' | 'before'; idempotencyKey: string } | null;
}

export interface ChargePage {
  charges: Charge[];
  hasMore: boolean;
}

/**
 * The charge a list cursor names: its id (`ch_…`, as Stripe's clients send the last object's id)
 * or its idempotency key, in this tenant; the idempotency key, or null when it names none. An id
 * wins over a key that happens to spell another charge's id.
 */
export async function findChargeCursor(pool: LedgerPool, tenant: string, idOrKey: string): Promise<string | null> {
  const result = await pool.query<{ idempotency_key: string }>(
    `SELECT idempotency_key FROM charges WHERE tenant = $1 AND (id = $2 OR idempotency_key = $2)
      ORDER BY (id = $2) DESC LIMIT 1`,
    [tenant, idOrKey],
  );
  return result.rows[0]?.idempotency_key ?? null;
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
  const page = filter.page ?? null;
  const cursor = page
    ? {
        direction: page.direction,
        row: `(SELECT created_at, idempotency_key FROM charges WHERE tenant = $1 AND idempotency_key = ${param(page.idempotencyKey)})`,
      }
    : null;
  const { rows, hasMore } = await keysetPage<ChargeRow>(pool, {
    from: 'charge_statuses',
    orderBy: ['created_at', 'idempotency_key'],
    newestFirst: true,
    conditions,
    params,
    cursor,
    limit: filter.limit,
  });
  return { charges: rows.map((row) => fromRow(row).charge), hasMore };
}
