/**
 * When a charge refuses a cancel or a capture. Pure, so that the workflow (which answers with an
 * ApplicationFailure) and the service (which answers for a closed workflow from the ledger, with a
 * ChargeStateConflictError) judge by the same rule and say the same thing.
 */
import type { Charge } from './charge.js';
import type { ChargeStateRefusalName } from './refusals.js';

/** Which refusal, and what it says about this charge (the refusal's hint is added by whoever raises it). */
export interface ChargeStateRefusal {
  name: ChargeStateRefusalName;
  detail: string;
}

export function isOpen(charge: Charge): boolean {
  return charge.status === 'pending' || charge.status === 'requires_action' || charge.status === 'reserved';
}

export function hasSucceeded(charge: Charge): boolean {
  return charge.status === 'succeeded' || charge.status === 'partially_refunded' || charge.status === 'refunded';
}

/** Cancel is allowed while the charge is open; a second cancel of a cancelled charge returns it. */
export function cancelRefusal(charge: Charge): ChargeStateRefusal | null {
  if (hasSucceeded(charge)) return { name: 'alreadySucceeded', detail: `charge ${charge.idempotencyKey} already succeeded` };
  if (charge.status === 'declined') return { name: 'declined', detail: `charge ${charge.idempotencyKey} was declined` };
  return null;
}

/**
 * Capture is allowed for manual-capture charges that are open; a repeated capture (no amount, or
 * the amount captured) returns the charge. `amountMinor` null: all that is reserved.
 */
export function captureRefusal(charge: Charge, amountMinor: number | null): ChargeStateRefusal | null {
  if (charge.captureMode !== 'manual') {
    return { name: 'notManualCapture', detail: `charge ${charge.idempotencyKey} is captured automatically` };
  }
  if (amountMinor !== null && (!Number.isSafeInteger(amountMinor) || amountMinor < 1 || amountMinor > charge.amountMinor)) {
    return { name: 'captureAmountInvalid', detail: `capture amount ${amountMinor} is outside 1..${charge.amountMinor}` };
  }
  if (charge.status === 'cancelled' || charge.status === 'cancelling') {
    const why = charge.failureReason === 'hold_expired' ? 'its hold expired' : 'it was cancelled';
    return { name: 'alreadyCancelled', detail: `charge ${charge.idempotencyKey} cannot be captured: ${why}` };
  }
  if (charge.status === 'declined') return { name: 'declined', detail: `charge ${charge.idempotencyKey} was declined` };
  if (hasSucceeded(charge) && amountMinor !== null && amountMinor !== charge.amountCapturedMinor) {
    return {
      name: 'captureAmountConflict',
      detail: `charge ${charge.idempotencyKey} was captured for ${charge.amountCapturedMinor}, not ${amountMinor}`,
    };
  }
  return null;
}
