import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { chargeStatuses, type Charge, type ChargeStatus } from '../src/domain/charge.js';
import { cancelRefusal, captureRefusal } from '../src/domain/charge-rules.js';
import { stateConflict } from '../src/service/temporal-failures.js';
import { assertCancellable, assertCapturable } from '../workflows/charge-state.js';

// The workflow judges cancel and capture while it runs; the service judges them from the ledger
// row once it has closed. Both call the same domain rules, and must answer alike: the same
// refusal type and the same message, for every charge and every amount.

function chargeWith(status: ChargeStatus, captureMode: Charge['captureMode'], failureReason: string | null = null): Charge {
  const at = '2026-01-01T00:00:00.000Z';
  const captured = status === 'succeeded' || status === 'partially_refunded' || status === 'refunded';
  return {
    id: 'ch_test',
    tenant: 't',
    idempotencyKey: `k-${status}-${captureMode}`,
    status,
    amountMinor: 1_000,
    amountCapturedMinor: captured ? 600 : 0,
    amountRefundedMinor: status === 'refunded' ? 600 : status === 'partially_refunded' ? 100 : 0,
    amountHeldMinor: status === 'reserved' ? 1_000 : 0,
    currency: 'USD',
    orderId: 'o',
    payerAccountId: 'payer',
    payeeAccountId: 'payee',
    captureMode,
    description: null,
    metadata: null,
    declineCode: status === 'declined' ? 'insufficient_funds' : null,
    failureReason,
    holdExpiresAt: null,
    createdAt: at,
    updatedAt: at,
  };
}

/** What the workflow answers: null when allowed, else its failure's type and message. */
function workflowAnswer(judge: () => void): { type: string; message: string } | null {
  try {
    judge();
    return null;
  } catch (error) {
    if (!(error instanceof ApplicationFailure)) throw error;
    expect(error.nonRetryable).toBe(true);
    return { type: error.type ?? '', message: error.message };
  }
}

/** What the service answers for the same charge once its workflow has closed. */
function serviceAnswer(refusal: ReturnType<typeof cancelRefusal>): { type: string; message: string } | null {
  if (refusal === null) return null;
  const conflict = stateConflict(refusal);
  return { type: conflict.reason, message: conflict.message };
}

const charges = chargeStatuses.flatMap((status) =>
  (['automatic', 'manual'] as const).flatMap((mode) => [chargeWith(status, mode), chargeWith(status, mode, 'hold_expired')]),
);
const amounts = [null, 1, 600, 700, 1_000, 1_001, 0, 1.5];

describe('cancel and capture rules: one source for the workflow and the service', () => {
  it('the workflow and the service give the same answer to every cancel', () => {
    for (const charge of charges) {
      expect(serviceAnswer(cancelRefusal(charge)), charge.status).toEqual(workflowAnswer(() => assertCancellable(charge)));
    }
  });

  it('the workflow and the service give the same answer to every capture', () => {
    let refused = 0;
    for (const charge of charges) {
      for (const amount of amounts) {
        const answer = workflowAnswer(() => assertCapturable(charge, amount));
        if (answer) refused++;
        expect(serviceAnswer(captureRefusal(charge, amount)), `${charge.status} ${charge.captureMode} ${amount}`).toEqual(answer);
      }
    }
    // The grid exercises refusals and acceptances alike.
    expect(refused).toBeGreaterThan(0);
    expect(refused).toBeLessThan(charges.length * amounts.length);
  });

  it('a captured charge asked for more than was authorised is an invalid amount, not an amount conflict', () => {
    const captured = chargeWith('succeeded', 'manual');
    expect(captureRefusal(captured, 1_001)?.name).toBe('captureAmountInvalid');
    expect(captureRefusal(captured, 700)?.name).toBe('captureAmountConflict');
    expect(captureRefusal(captured, 600)).toBeNull();
    expect(captureRefusal(captured, null)).toBeNull();
  });

  it('cancel: allowed while open and repeatable once cancelled; refused after success or a decline', () => {
    expect(cancelRefusal(chargeWith('reserved', 'manual'))).toBeNull();
    expect(cancelRefusal(chargeWith('cancelled', 'manual'))).toBeNull();
    expect(cancelRefusal(chargeWith('partially_refunded', 'automatic'))?.name).toBe('alreadySucceeded');
    expect(cancelRefusal(chargeWith('declined', 'automatic'))?.name).toBe('declined');
  });
});
