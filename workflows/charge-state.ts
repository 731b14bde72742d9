import { ApplicationFailure } from '@temporalio/workflow';
import type { Charge, ChargeIntent } from '../src/domain/charge.js';
import { cancelRefusal, captureRefusal, type ChargeStateRefusal } from '../src/domain/charge-rules.js';
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

export function stateRefusal(name: ChargeStateRefusalName, detail: string): ApplicationFailure {
  const refusal = chargeStateRefusals[name];
  return ApplicationFailure.create({ type: refusal.type, message: `${detail}: ${refusal.hint}`, nonRetryable: true });
}

function throwIfRefused(refusal: ChargeStateRefusal | null): void {
  if (refusal) throw stateRefusal(refusal.name, refusal.detail);
}

/** The domain's cancel rule, as the workflow answers it: a non-retryable failure. */
export function assertCancellable(charge: Charge): void {
  throwIfRefused(cancelRefusal(charge));
}

/** The domain's capture rule, as the workflow answers it: a non-retryable failure. */
export function assertCapturable(charge: Charge, amountMinor: number | null): void {
  throwIfRefused(captureRefusal(charge, amountMinor));
}
