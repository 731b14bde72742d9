/**
 * Stripe's card decline codes, and the caller-facing decline code (src/domain/charge.ts,
 * DeclineCode) each one maps to: Stripe's vocabulary, so it lives with Stripe's connector, which
 * answers every decline already mapped (PaymentConnector.declineOf).
 *
 * The codes are Stripe's `decline_code`, or its `code` where a decline has no separate
 * `decline_code`, as for `expired_card`. The caller's codes are the closed list the API already
 * answers with, so callers never see a new value: the mapping keeps the caller's meaning ("why the
 * payer's side cannot pay") and the exact provider code travels beside it for operators and
 * reconciliation.
 */
import type { MappedDeclineCode, ProviderDecline } from '../../domain/provider-declines.js';

export const stripeDeclineCodes = [
  'generic_decline',
  'do_not_honor',
  'insufficient_funds',
  'card_velocity_exceeded',
  'withdrawal_count_limit_exceeded',
  'lost_card',
  'stolen_card',
  'pickup_card',
  'restricted_card',
  'fraudulent',
  'expired_card',
  'incorrect_cvc',
  'incorrect_number',
  'invalid_account',
  'card_not_supported',
  'currency_not_supported',
  'transaction_not_allowed',
  'authentication_required',
  'processing_error',
  'try_again_later',
  'issuer_not_available',
] as const;

export type StripeDeclineCode = (typeof stripeDeclineCodes)[number];

/**
 * Where each provider code lands. `account_frozen` is the caller's "the payer's instrument refuses
 * to pay" (the issuer or the card's state said no); `unknown_account` is "no such instrument".
 */
export const callerDeclineCodeOf: Readonly<Record<StripeDeclineCode, MappedDeclineCode>> = {
  generic_decline: 'account_frozen',
  do_not_honor: 'account_frozen',
  insufficient_funds: 'insufficient_funds',
  card_velocity_exceeded: 'insufficient_funds',
  withdrawal_count_limit_exceeded: 'insufficient_funds',
  lost_card: 'account_frozen',
  stolen_card: 'account_frozen',
  pickup_card: 'account_frozen',
  restricted_card: 'account_frozen',
  fraudulent: 'account_frozen',
  expired_card: 'account_frozen',
  incorrect_cvc: 'account_frozen',
  incorrect_number: 'unknown_account',
  invalid_account: 'unknown_account',
  card_not_supported: 'account_frozen',
  currency_not_supported: 'currency_mismatch',
  transaction_not_allowed: 'account_frozen',
  authentication_required: 'account_frozen',
  processing_error: 'account_frozen',
  try_again_later: 'account_frozen',
  issuer_not_available: 'account_frozen',
};

/**
 * Declines an issuer may lift on a later attempt. Still a decline for the charge that got it (the
 * PaymentIntent is done with that attempt); the flag tells the caller a new charge, with a
 * new key, may succeed.
 */
export const transientStripeDeclines: ReadonlySet<StripeDeclineCode> = new Set([
  'processing_error',
  'try_again_later',
  'issuer_not_available',
]);

export function isStripeDeclineCode(code: string): code is StripeDeclineCode {
  return (stripeDeclineCodes as readonly string[]).includes(code);
}

/** A code the list does not know still declines the charge, as a generic decline. */
export function mapStripeDecline(code: string | null | undefined): ProviderDecline {
  const providerDeclineCode = code ?? 'generic_decline';
  const known = isStripeDeclineCode(providerDeclineCode) ? providerDeclineCode : 'generic_decline';
  return {
    declineCode: callerDeclineCodeOf[known],
    providerDeclineCode,
    transient: transientStripeDeclines.has(known),
  };
}
