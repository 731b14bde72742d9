/**
 * The test PaymentMethods the simulator understands, named and behaving as Stripe's test mode's do
 * (Stripe's testing docs, "Declined payments" and "3D Secure authentication"), so a test written
 * against the simulator runs unchanged against Stripe's test mode.
 */

export type TestCardBehaviour =
  | { kind: 'authorize' }
  /** The issuer declines: Stripe's `code` and `decline_code` on the 402 card_error. */
  | { kind: 'decline'; code: string; declineCode: string; message: string }
  /** 3-D Secure is required before the issuer decides. */
  | { kind: 'authenticate' };

const declined = (declineCode: string, message: string, code = 'card_declined'): TestCardBehaviour => ({
  kind: 'decline',
  code,
  declineCode,
  message,
});

export const testCards: Readonly<Record<string, TestCardBehaviour>> = {
  pm_card_visa: { kind: 'authorize' },
  pm_card_mastercard: { kind: 'authorize' },
  pm_card_amex: { kind: 'authorize' },
  pm_card_visa_chargeDeclined: declined('generic_decline', 'Your card was declined.'),
  pm_card_visa_chargeDeclinedInsufficientFunds: declined('insufficient_funds', 'Your card has insufficient funds.'),
  pm_card_visa_chargeDeclinedLostCard: declined('lost_card', 'Your card was declined.'),
  pm_card_visa_chargeDeclinedStolenCard: declined('stolen_card', 'Your card was declined.'),
  pm_card_visa_chargeDeclinedVelocityLimitExceeded: declined('card_velocity_exceeded', 'Your card was declined for making repeated attempts too frequently or exceeding its amount limit.'),
  pm_card_chargeDeclinedFraudulent: declined('fraudulent', 'Your card was declined.'),
  pm_card_chargeDeclinedExpiredCard: declined('expired_card', 'Your card has expired.', 'expired_card'),
  pm_card_chargeDeclinedIncorrectCvc: declined('incorrect_cvc', "Your card's security code is incorrect.", 'incorrect_cvc'),
  pm_card_chargeDeclinedProcessingError: declined('processing_error', 'An error occurred while processing your card. Try again in a little bit.', 'processing_error'),
  pm_card_threeDSecure2Required: { kind: 'authenticate' },
  pm_card_authenticationRequired: { kind: 'authenticate' },
};
