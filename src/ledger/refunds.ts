import type { Refund, RefundFailureCode, RefundIntent } from '../domain/refund.js';
import type { LedgerPool } from './pool.js';
import { asLedgerRefusal } from './errors.js';

/** A row of the refunds table, as ledger_refund returns it. */
interface RefundRow {
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
}

/** The ledger's view of a refund: the refund itself and the fingerprint it was first asked with. */
export interface LedgerRefund {
  fingerprint: string;
  refund: Refund;
}

function fromRow(row: RefundRow): LedgerRefund {
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
    return fromRow(row);
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
  return row ? fromRow(row) : null;
}

/** The refunds of one charge, oldest first, refused ones included. */
export async function listRefunds(pool: LedgerPool, tenant: string, chargeKey: string, limit = 100): Promise<Refund[]> {
  const result = await pool.query<RefundRow>(
    'SELECT * FROM refunds WHERE tenant = $1 AND charge_key = $2 ORDER BY created_at, refund_key LIMIT $3',
    [tenant, chargeKey, limit],
  );
  return result.rows.map((row) => fromRow(row).refund);
}
