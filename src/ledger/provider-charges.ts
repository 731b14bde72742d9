/**
 * The ledger steps of a provider charge (docs/providers.md), each one function, one transaction:
 * every answer of the provider is recorded together with the ledger change it decides.
 */
import type { ChargeIntent, DeclineCode } from '../domain/charge.js';
import type { LedgerPool } from './pool.js';
import { callLedgerFunction, type LedgerCharge, type LedgerStatement } from './charges.js';

const statements = {
  try: {
    name: 'ledger_provider_try',
    text: 'SELECT * FROM ledger_provider_try($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)',
  },
  authorizeBegin: { name: 'ledger_provider_authorize_begin', text: 'SELECT * FROM ledger_provider_authorize_begin($1, $2)' },
  authorized: { name: 'ledger_provider_authorized', text: 'SELECT * FROM ledger_provider_authorized($1, $2, $3, $4, $5)' },
  declined: { name: 'ledger_provider_declined', text: 'SELECT * FROM ledger_provider_declined($1, $2, $3, $4, $5)' },
  captureBegin: { name: 'ledger_provider_capture_begin', text: 'SELECT * FROM ledger_provider_capture_begin($1, $2)' },
  captureRefused: { name: 'ledger_provider_capture_refused', text: 'SELECT * FROM ledger_provider_capture_refused($1, $2, $3)' },
  confirm: { name: 'ledger_provider_confirm', text: 'SELECT * FROM ledger_provider_confirm($1, $2, $3)' },
  voided: { name: 'ledger_provider_voided', text: 'SELECT * FROM ledger_provider_voided($1, $2, $3)' },
} as const satisfies Record<string, LedgerStatement>;

/** Try for a provider charge: the hold is on the clearing account the ledger derives; the key and mandate rules are Try's. */
export function tryProviderHold(pool: LedgerPool, intent: ChargeIntent, holdTtlMs: number): Promise<LedgerCharge> {
  const r = intent.request;
  if (!r.paymentMethod) throw new Error(`charge ${intent.idempotencyKey} names no payment method; it is not a provider charge`);
  return callLedgerFunction(pool, statements.try, [
    intent.tenant, intent.idempotencyKey, intent.chargeId, intent.fingerprint,
    r.orderId, r.paymentMethod.provider, r.paymentMethod.id, r.payeeAccountId, r.currency, r.amountMinor,
    r.captureMode, r.description, r.metadata === null ? null : JSON.stringify(r.metadata),
    holdTtlMs, intent.actingKeyId ?? null,
  ]);
}

/** Before authorize is sent: refuses a cancelled charge (HoldCancelled), records the first send time. */
export function beginProviderAuthorize(pool: LedgerPool, tenant: string, idempotencyKey: string): Promise<LedgerCharge> {
  return callLedgerFunction(pool, statements.authorizeBegin, [tenant, idempotencyKey]);
}

/** The provider holds the money (`authorized`) or waits for the payer (`requires_action`). */
export function recordProviderAuthorized(
  pool: LedgerPool,
  tenant: string,
  idempotencyKey: string,
  paymentId: string,
  state: 'authorized' | 'requires_action',
  nextAction: unknown,
): Promise<LedgerCharge> {
  return callLedgerFunction(pool, statements.authorized, [
    tenant, idempotencyKey, paymentId, state, nextAction === null || nextAction === undefined ? null : JSON.stringify(nextAction),
  ]);
}

/** The provider declined: the charge is declined and its hold released. */
export function recordProviderDeclined(
  pool: LedgerPool,
  tenant: string,
  idempotencyKey: string,
  paymentId: string | null,
  declineCode: DeclineCode,
  providerDeclineCode: string,
): Promise<LedgerCharge> {
  return callLedgerFunction(pool, statements.declined, [tenant, idempotencyKey, paymentId, declineCode, providerDeclineCode]);
}

/** Before capture is sent: from here until the answer is recorded, Cancel refuses (ProviderCaptureInFlight). */
export function beginProviderCapture(pool: LedgerPool, tenant: string, idempotencyKey: string): Promise<LedgerCharge> {
  return callLedgerFunction(pool, statements.captureBegin, [tenant, idempotencyKey]);
}

/** The provider refused the capture for good: the charge may be cancelled again. */
export function recordProviderCaptureRefused(
  pool: LedgerPool,
  tenant: string,
  idempotencyKey: string,
  state: 'voided' | null,
): Promise<LedgerCharge> {
  return callLedgerFunction(pool, statements.captureRefused, [tenant, idempotencyKey, state]);
}

/** The provider captured `capturedMinor`: Confirm moves it from the clearing account to the payee. */
export function confirmProviderCapture(pool: LedgerPool, tenant: string, idempotencyKey: string, capturedMinor: number): Promise<LedgerCharge> {
  return callLedgerFunction(pool, statements.confirm, [tenant, idempotencyKey, capturedMinor]);
}

/** Nothing is held at the provider for this cancelled (or declined) charge any more. */
export function recordProviderVoided(pool: LedgerPool, tenant: string, idempotencyKey: string, paymentId: string | null): Promise<LedgerCharge> {
  return callLedgerFunction(pool, statements.voided, [tenant, idempotencyKey, paymentId]);
}

/** Provider charges the ledger cancelled whose void is not recorded yet (status `cancelling`). */
export interface PendingProviderVoids {
  count: number;
  /** Since when the oldest of them was last changed (its Cancel), in seconds; 0 when there is none. */
  oldestSeconds: number;
}

/**
 * What the chargeguard_provider_voids_pending gauges read. Served by the partial index of open
 * provider charges (charges_provider_open), which holds only charges whose provider state is still
 * open: a void retried for a minute is one row there, a healthy ledger a handful.
 */
export async function pendingProviderVoids(pool: LedgerPool): Promise<PendingProviderVoids> {
  const { rows } = await pool.query<{ count: string; oldest_seconds: number | null }>(
    `SELECT count(*) AS count, extract(epoch FROM now() - min(updated_at))::float8 AS oldest_seconds
       FROM charges
      WHERE provider IS NOT NULL AND provider_state IN ('authorizing', 'requires_action', 'authorized')
        AND hold_state = 'CANCELLED'`,
  );
  const row = rows[0];
  return { count: Number(row?.count ?? 0), oldestSeconds: Math.max(0, Math.floor(row?.oldest_seconds ?? 0)) };
}
