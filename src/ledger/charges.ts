import type { Charge, ChargeIntent, DeclineCode, HoldState, CaptureMode } from '../domain/charge.js';
import { statusOfHold } from '../domain/charge.js';
import type { LedgerPool } from './pool.js';
import { asLedgerRefusal } from './errors.js';

/** A row of the charges table, as the ledger functions return it. */
export interface ChargeRow {
  tenant: string;
  idempotency_key: string;
  id: string;
  fingerprint: string;
  order_id: string;
  payer_account_id: string;
  payee_account_id: string;
  currency: string;
  amount_minor: number;
  capture_mode: CaptureMode;
  description: string | null;
  metadata: Record<string, string> | null;
  hold_state: HoldState;
  held_minor: number;
  captured_minor: number;
  refunded_minor: number;
  decline_code: DeclineCode | null;
  failure_reason: string | null;
  hold_expires_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

/** The ledger's view of a charge, with the hold state the truth table speaks of. */
export interface LedgerCharge {
  holdState: HoldState;
  fingerprint: string;
  charge: Charge;
}

export function fromRow(row: ChargeRow): LedgerCharge {
  return {
    holdState: row.hold_state,
    fingerprint: row.fingerprint,
    charge: {
      id: row.id,
      tenant: row.tenant,
      idempotencyKey: row.idempotency_key,
      status: statusOfHold(row.hold_state, row.captured_minor, row.refunded_minor),
      amountMinor: row.amount_minor,
      amountCapturedMinor: row.captured_minor,
      amountRefundedMinor: row.refunded_minor,
      amountHeldMinor: row.held_minor,
      currency: row.currency,
      orderId: row.order_id,
      payerAccountId: row.payer_account_id,
      payeeAccountId: row.payee_account_id,
      captureMode: row.capture_mode,
      description: row.description,
      metadata: row.metadata,
      declineCode: row.decline_code,
      failureReason: row.failure_reason,
      holdExpiresAt: row.hold_expires_at?.toISOString() ?? null,
      createdAt: row.created_at.toISOString(),
      updatedAt: row.updated_at.toISOString(),
    },
  };
}

function intentParams(intent: ChargeIntent): unknown[] {
  const r = intent.request;
  return [
    intent.tenant, intent.idempotencyKey, intent.chargeId, intent.fingerprint,
    r.orderId, r.payerAccountId, r.payeeAccountId, r.currency, r.amountMinor,
    r.captureMode, r.description, r.metadata === null ? null : JSON.stringify(r.metadata),
  ];
}

async function callLedgerFunction(pool: LedgerPool, sql: string, params: unknown[]): Promise<LedgerCharge> {
  try {
    const result = await pool.query<ChargeRow>(sql, params);
    const row = result.rows[0];
    if (!row) throw new Error(`ledger function returned no row: ${sql}`);
    return fromRow(row);
  } catch (error) {
    throw asLedgerRefusal(error) ?? error;
  }
}

/** Try: reserve the amount on the payer, or record the decline. One transaction, idempotent. */
export function tryHold(pool: LedgerPool, intent: ChargeIntent, holdTtlMs: number): Promise<LedgerCharge> {
  return callLedgerFunction(
    pool,
    'SELECT * FROM ledger_try($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)',
    [...intentParams(intent), holdTtlMs],
  );
}

/** Confirm: capture the hold (all of it, or `captureMinor` of it, releasing the rest). */
export function confirmHold(
  pool: LedgerPool,
  tenant: string,
  idempotencyKey: string,
  captureMinor: number | null,
): Promise<LedgerCharge> {
  return callLedgerFunction(pool, 'SELECT * FROM ledger_confirm($1, $2, $3)', [tenant, idempotencyKey, captureMinor]);
}

/** Cancel: release the hold, or leave a tombstone when no Try has run yet. */
export function cancelHold(pool: LedgerPool, intent: ChargeIntent, reason: string): Promise<LedgerCharge> {
  return callLedgerFunction(
    pool,
    'SELECT * FROM ledger_cancel($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)',
    [...intentParams(intent), reason],
  );
}

export async function readCharge(pool: LedgerPool, tenant: string, idempotencyKey: string): Promise<LedgerCharge | null> {
  const result = await pool.query<ChargeRow>(
    'SELECT * FROM charges WHERE tenant = $1 AND idempotency_key = $2',
    [tenant, idempotencyKey],
  );
  const row = result.rows[0];
  return row ? fromRow(row) : null;
}
