import { ApplicationFailure } from '@temporalio/workflow';
import type { Charge, ChargeIntent } from '../src/domain/charge.js';
import { chargeStateRefusals, type ChargeStateRefusalName } from '../src/domain/refusals.js';

/** The charge before the ledger has seen it. */
export function pendingCharge(intent: ChargeIntent, startedAt: Date): Charge {
  const at = startedAt.toISOString();
  const r = intent.request;
  return {
    id: intent.chargeId,
    tenant: intent.tenant,
    idempotencyKey: intent.idempotencyKey,
    status: 'pending',
    amountMinor: r.amountMinor,
    amountCapturedMinor: 0,
    amountRefundedMinor: 0,
    amountHeldMinor: 0,
    currency: r.currency,
    orderId: r.orderId,
    payerAccountId: r.payerAccountId,
    payeeAccountId: r.payeeAccountId,
    captureMode: r.captureMode,
    description: r.description,
    metadata: r.metadata,
    declineCode: null,
    failureReason: null,
    holdExpiresAt: null,
    createdAt: at,
    updatedAt: at,
  };
}

export function isOpen(charge: Charge): boolean {
  return charge.status === 'pending' || charge.status === 'reserved';
}

export function hasSucceeded(charge: Charge): boolean {
  return charge.status === 'succeeded' || charge.status === 'partially_refunded' || charge.status === 'refunded';
}

export function stateRefusal(name: ChargeStateRefusalName, detail: string): ApplicationFailure {
  const refusal = chargeStateRefusals[name];
  return ApplicationFailure.create({ type: refusal.type, message: `${detail}: ${refusal.hint}`, nonRetryable: true });
}

/** Cancel is allowed while the charge is open; a second cancel of a cancelled charge returns it. */
export function assertCancellable(charge: Charge): void {
  if (hasSucceeded(charge)) throw stateRefusal('alreadySucceeded', `charge ${charge.idempotencyKey} already succeeded`);
  if (charge.status === 'declined') throw stateRefusal('declined', `charge ${charge.idempotencyKey} was declined`);
}

/** Capture is allowed for manual-capture charges that are open; a repeated capture returns the charge. */
export function assertCapturable(charge: Charge, amountMinor: number | null): void {
  if (charge.captureMode !== 'manual') {
    throw stateRefusal('notManualCapture', `charge ${charge.idempotencyKey} is captured automatically`);
  }
  if (amountMinor !== null && (!Number.isSafeInteger(amountMinor) || amountMinor < 1 || amountMinor > charge.amountMinor)) {
    throw stateRefusal('captureAmountInvalid', `capture amount ${amountMinor} is outside 1..${charge.amountMinor}`);
  }
  if (charge.status === 'cancelled') {
    const why = charge.failureReason === 'hold_expired' ? 'its hold expired' : 'it was cancelled';
    throw stateRefusal('alreadyCancelled', `charge ${charge.idempotencyKey} cannot be captured: ${why}`);
  }
  if (charge.status === 'declined') throw stateRefusal('declined', `charge ${charge.idempotencyKey} was declined`);
  if (hasSucceeded(charge) && amountMinor !== null && amountMinor !== charge.amountCapturedMinor) {
    throw stateRefusal(
      'captureAmountConflict',
      `charge ${charge.idempotencyKey} was captured for ${charge.amountCapturedMinor}, not ${amountMinor}`,
    );
  }
}
