/**
 * Authorize with the retention rule applied: while the provider still keeps the key's answer, a
 * retry is just the same request again; once it may have pruned the key, the same key would create
 * a second payment, so the payment is looked up by reference first and only a lookup that finds
 * nothing lets a new one be created.
 */
import {
  type AuthorizeRequest,
  type AuthorizeResult,
  keyMayHaveExpired,
  type PaymentConnector,
  type ProviderPayment,
} from './connector.js';

export interface AuthorizeTiming {
  /** When this key was first sent (the caller records it before the first attempt). */
  firstSentAtMs: number;
  nowMs: number;
  /** When the charge was created: the lookup's window starts there. */
  chargeCreatedAtMs: number;
}

export async function authorizeOnce(
  connector: PaymentConnector,
  request: AuthorizeRequest,
  timing: AuthorizeTiming,
): Promise<AuthorizeResult> {
  if (!keyMayHaveExpired(connector, timing.firstSentAtMs, timing.nowMs)) return connector.authorize(request);
  const lookup = await connector.findByReference({ reference: request.reference, createdNotBeforeMs: timing.chargeCreatedAtMs });
  switch (lookup.outcome) {
    case 'not_found':
      return connector.authorize(request);
    case 'found':
      return asAuthorizeResult(connector, lookup.payments[0]);
    default:
      return lookup;
  }
}

/** What the first authorize would have answered, read from the payment it left behind. */
function asAuthorizeResult(connector: PaymentConnector, payment: ProviderPayment): AuthorizeResult {
  switch (payment.state) {
    case 'authorized':
      return { outcome: 'authorized', payment };
    case 'requires_action':
      return { outcome: 'requires_action', payment, nextAction: payment.nextAction };
    case 'declined':
      return { outcome: 'declined', payment, ...connector.declineOf(payment.lastDeclineCode, 'attempt'), detail: `payment ${payment.id} was declined` };
    case 'processing':
      return { outcome: 'unknown', reason: 'processing', detail: `payment ${payment.id} is ${payment.providerStatus}` };
    case 'captured':
    case 'voided':
      return {
        outcome: 'rejected',
        reason: 'state_conflict',
        code: null,
        detail: `payment ${payment.id} is already ${payment.state}: authorize is long past`,
        payment,
      };
  }
}
