import type { Refund, RefundFailureCode, RefundIntent } from '../domain/refund.js';
import type { LedgerPool } from './pool.js';
import { asLedgerRefusal } from './errors.js';
import { keysetPage } from './pages.js';

/** A row of the refunds table, as ledger_refund returns it. */
export interface RefundRow {
  tenant: string;
  charge_key: string;
  refund_key: string;
  id: string;
  charge_id: string;
  currency: string;
  fingerprint: string;
  requested_minor: number | null;
  amount_minor: number;
  status: 'succeeded' | 'failed';
  failure_code: RefundFailureCode | null;
  transfer_id: number | null;
  created_by_key_id?: string | null;
  created_at: Date;
  provider_refund_id?: string | null;
  provider_refund_failure?: string | null;
}

/** The ledger's view of a refund: the refund itself and the fingerprint it was first asked with. */
export interface LedgerRefund {
  fingerprint: string;
  refund: Refund;
}

export function refundFromRow(row: RefundRow): LedgerRefund {
  return {
    fingerprint: row.fingerprint,
    refund: {
      id: row.id,
      tenant: row.tenant,
      chargeKey: row.charge_key,
      chargeId: row.charge_id,
      refundKey: row.refund_key,
      amountMinor: row.amount_minor,
      requestedAmountMinor: row.requested_minor,
      currency: row.currency.trim(),
      status: row.status,
      failureCode: row.failure_code,
      ...(row.created_by_key_id !== undefined ? { createdByKeyId: row.created_by_key_id } : {}),
      createdAt: row.created_at.toISOString(),
      ...(row.provider_refund_id ? { providerRefundId: row.provider_refund_id } : {}),
      ...(row.provider_refund_failure ? { providerRefundFailure: row.provider_refund_failure } : {}),
    },
  };
}

/**
 * Refund: move money back from the payee to the payer, or record why not. One transaction,
 * idempotent per (tenant, charge key, refund key). Unknown or uncaptured charges, a refund key
 * reused with another amount, and an acting key the ledger's api_keys row does not allow to
 * refund for the tenant (RefundNotAuthorized) are LedgerRefusalErrors.
 */
export async function refundCharge(pool: LedgerPool, intent: RefundIntent): Promise<LedgerRefund> {
  try {
    const result = await pool.query<RefundRow>('SELECT * FROM ledger_refund($1, $2, $3, $4, $5, $6, $7)', [
      intent.tenant,
      intent.chargeKey,
      intent.refundKey,
      intent.refundId,
      intent.fingerprint,
      intent.amountMinor,
      intent.actingKeyId ?? null,
    ]);
    const row = result.rows[0];
    if (!row) throw new Error('ledger_refund returned no row');
    return refundFromRow(row);
  } catch (error) {
    throw asLedgerRefusal(error) ?? error;
  }
}

export async function readRefund(
  pool: LedgerPool,
  tenant: string,
  chargeKey: string,
  refundKey: string,
): Promise<LedgerRefund | null> {
  const result = await pool.query<RefundRow>(
    'SELECT * FROM refunds WHERE tenant = $1 AND charge_key = $2 AND refund_key = $3',
    [tenant, chargeKey, refundKey],
  );
  const row = result.rows[0];
  return row ? refundFromRow(row) : null;
}

/**
 * The refund of one charge a list cursor names: its id (`re_…`) or its refund key; the refund key,
 * or null when it names none. An id wins over a key that happens to spell another refund's id.
 */
export async function findRefundCursor(pool: LedgerPool, tenant: string, chargeKey: string, idOrKey: string): Promise<string | null> {
  const result = await pool.query<{ refund_key: string }>(
    `SELECT refund_key FROM refunds WHERE tenant = $1 AND charge_key = $2 AND (id = $3 OR refund_key = $3)
      ORDER BY (id = $3) DESC LIMIT 1`,
    [tenant, chargeKey, idOrKey],
  );
  return result.rows[0]?.refund_key ?? null;
}

/** The refunds of one charge, oldest first, refused ones included (at most `limit`). */
export async function listRefunds(pool: LedgerPool, tenant: string, chargeKey: string, limit = 100): Promise<Refund[]> {
  return (await listRefundPage(pool, tenant, chargeKey, { limit })).refunds;
}

/** The refunds of one charge, oldest first, refused ones included: one page of at most `limit`. */
export async function listRefundPage(
  pool: LedgerPool,
  tenant: string,
  chargeKey: string,
  page: { limit: number; cursor?: { direction: 'after' | 'before'; refundKey: string } | null },
): Promise<{ refunds: Refund[]; hasMore: boolean }> {
  const cursor = page.cursor
    ? { direction: page.cursor.direction, row: '(SELECT created_at, refund_key FROM refunds WHERE tenant = $1 AND charge_key = $2 AND refund_key = $3)' }
    : null;
  const { rows, hasMore } = await keysetPage<RefundRow>(pool, {
    from: 'refunds',
    orderBy: ['created_at', 'refund_key'],
    newestFirst: false,
    conditions: ['tenant = $1', 'charge_key = $2'],
    params: page.cursor ? [tenant, chargeKey, page.cursor.refundKey] : [tenant, chargeKey],
    cursor,
    limit: page.limit,
  });
  return { refunds: rows.map((row) => refundFromRow(row).refund), hasMore };
}

/** A tenant's refund named by its id (`re_…`), as a tenant-wide list cursor: its id, or null when it names none. */
export async function findTenantRefundCursor(pool: LedgerPool, tenant: string, id: string): Promise<string | null> {
  const result = await pool.query<{ id: string }>('SELECT id FROM refunds WHERE tenant = $1 AND id = $2', [tenant, id]);
  return result.rows[0]?.id ?? null;
}

/**
 * Every refund of a tenant, newest first, refused ones included: one page of at most `limit`, on
 * (created_at, id) (index refunds_by_tenant), so pages stay stable while refunds are added.
 */
export async function listTenantRefundPage(
  pool: LedgerPool,
  tenant: string,
  page: { limit: number; cursor?: { direction: 'after' | 'before'; refundId: string } | null },
): Promise<{ refunds: Refund[]; hasMore: boolean }> {
  const cursor = page.cursor
    ? { direction: page.cursor.direction, row: '(SELECT created_at, id FROM refunds WHERE tenant = $1 AND id = $2)' }
    : null;
  const { rows, hasMore } = await keysetPage<RefundRow>(pool, {
    from: 'refunds',
    orderBy: ['created_at', 'id'],
    newestFirst: true,
    conditions: ['tenant = $1'],
    params: page.cursor ? [tenant, page.cursor.refundId] : [tenant],
    cursor,
    limit: page.limit,
  });
  return { refunds: rows.map((row) => refundFromRow(row).refund), hasMore };
}

/** What a refund's provider side needs from its charge and its row (docs/providers.md, Refunds). */
export interface RefundProviderSide {
  /** Null: a ledger charge, nothing to do at any provider. */
  provider: string | null;
  paymentId: string | null;
  /** The charge's provider_state (captured for every refundable provider charge). */
  providerState: string | null;
  providerRefundId: string | null;
  providerRefundFailure: string | null;
  /** When the ledger decided the refund: no provider request for it can be older. */
  refundCreatedAt: Date;
}

/** The provider side of one refund, or null when the ledger has no such refund. */
export async function readRefundProviderSide(
  pool: LedgerPool,
  tenant: string,
  chargeKey: string,
  refundKey: string,
): Promise<RefundProviderSide | null> {
  const result = await pool.query<{
    provider: string | null;
    provider_payment_id: string | null;
    provider_state: string | null;
    provider_refund_id: string | null;
    provider_refund_failure: string | null;
    created_at: Date;
  }>(
    `SELECT c.provider, c.provider_payment_id, c.provider_state, r.provider_refund_id, r.provider_refund_failure, r.created_at
       FROM refunds r JOIN charges c ON c.tenant = r.tenant AND c.idempotency_key = r.charge_key
      WHERE r.tenant = $1 AND r.charge_key = $2 AND r.refund_key = $3`,
    [tenant, chargeKey, refundKey],
  );
  const row = result.rows[0];
  if (!row) return null;
  return {
    provider: row.provider,
    paymentId: row.provider_payment_id,
    providerState: row.provider_state,
    providerRefundId: row.provider_refund_id,
    providerRefundFailure: row.provider_refund_failure,
    refundCreatedAt: row.created_at,
  };
}

/**
 * The provider refunded this refund: its id recorded on the refund row, once (a repeat with the
 * same id returns the row; another id is a ProviderPaymentConflict refusal).
 */
export async function recordProviderRefunded(
  pool: LedgerPool,
  refund: Pick<RefundIntent, 'tenant' | 'chargeKey' | 'refundKey'>,
  providerRefundId: string,
): Promise<LedgerRefund> {
  return callRefundFunction(pool, 'SELECT * FROM ledger_refund_provider_refunded($1, $2, $3, $4)', [
    refund.tenant, refund.chargeKey, refund.refundKey, providerRefundId,
  ]);
}

/** The longest provider failure kept on a refund row (the column's CHECK). */
export const providerRefundFailureMaxLength = 2_000;

/** The provider refused this refund for good: why, recorded once (the first reason stays). */
export async function recordProviderRefundRejected(
  pool: LedgerPool,
  refund: Pick<RefundIntent, 'tenant' | 'chargeKey' | 'refundKey'>,
  failure: string,
): Promise<LedgerRefund> {
  return callRefundFunction(pool, 'SELECT * FROM ledger_refund_provider_rejected($1, $2, $3, $4)', [
    refund.tenant, refund.chargeKey, refund.refundKey,
    // By characters, as the CHECK counts: a cut through a surrogate pair would not encode.
    Array.from(failure).slice(0, providerRefundFailureMaxLength).join(''),
  ]);
}

async function callRefundFunction(pool: LedgerPool, text: string, values: unknown[]): Promise<LedgerRefund> {
  try {
    const row = (await pool.query<RefundRow>(text, values)).rows[0];
    if (!row) throw new Error(`${text} returned no row`);
    return refundFromRow(row);
  } catch (error) {
    throw asLedgerRefusal(error) ?? error;
  }
}
