/**
 * The one interface every payment service provider connector implements (docs/providers.md).
 *
 * A connector moves money at the provider with the same exactly-once rules as the ledger: every
 * call that changes anything carries an idempotency key the caller derives from the charge and the
 * step (`providerIdempotencyKey`), never from the attempt, so a retry after any failure is the same
 * request to the provider and can only ever have one effect.
 *
 * Every call answers with a typed outcome instead of throwing: the caller decides on outcomes, and
 * an exception would blur "the provider said no" with "we do not know what happened".
 */
import type { MappedDeclineCode, ProviderDecline } from '../domain/provider-declines.js';
import type { ProviderPaymentState, ProviderStepName } from '../domain/providers.js';

export type { ProviderStepName } from '../domain/providers.js';

/** Our name for a provider payment: who it belongs to and which charge it is. */
export interface PaymentReference {
  tenant: string;
  chargeId: string;
}


/**
 * The idempotency key for one step of one charge: the same on every attempt, so the provider
 * replays the first answer instead of acting twice. `<charge id>:<step>`; a refund's step names the
 * refund (`refund:<refund id>`), since one charge may be refunded several times.
 */
export function providerIdempotencyKey(chargeId: string, step: ProviderStepName): string {
  return `${chargeId}:${step}`;
}

/**
 * Where a provider payment stands, in our words (the provider's own status travels beside it): the
 * ledger's provider states (src/domain/providers.ts, ProviderPaymentState) but `authorizing`, which
 * is ours (sent, no answer recorded) and never the provider's, plus `processing`: the provider has
 * not decided yet. `requires_action`: the payer must act (3-D Secure), nothing is held yet;
 * `authorized`: held, waiting for capture or void; `captured` (whole or partial): the money moved;
 * `voided`: cancelled before capture, nothing moved; `declined`: the last attempt was declined.
 */
export type PaymentStateAtProvider = Exclude<ProviderPaymentState, 'authorizing'> | 'processing';

export interface ProviderPayment {
  /** The provider's id (Stripe: `pi_…`). */
  id: string;
  state: PaymentStateAtProvider;
  /** The provider's own status, for operators and logs. */
  providerStatus: string;
  /** From the payment's metadata; null when it carries none of ours. */
  reference: PaymentReference | null;
  amountMinor: number;
  /** What can still be captured. */
  amountCapturableMinor: number;
  /** What was captured. */
  amountCapturedMinor: number;
  currency: string;
  createdAtMs: number;
  /** The provider's `next_action` while the payer must act; null otherwise. */
  nextAction: unknown;
  /** The decline code of the last failed attempt, if any. */
  lastDeclineCode: string | null;
}

/**
 * The provider may have acted, or not: a timeout, a connection reset after the request was sent,
 * a 5xx, a 429, or 409 idempotency_key_in_use (the same key is still being processed). The caller
 * retries with the same key; the provider replays or finishes the first request.
 */
export interface UnknownOutcome {
  outcome: 'unknown';
  reason:
    | 'timeout'
    | 'connection_lost'
    | 'server_error'
    | 'rate_limited'
    | 'key_in_use'
    /** The provider accepted the request but has not decided yet (ask again, or wait for its event). */
    | 'processing'
    /** findByReference read as many payments as it may without finding the end of the window. */
    | 'lookup_incomplete';
  detail: string;
}

/**
 * A final refusal of the request itself: retrying it, with this key or any other, cannot succeed.
 * `idempotency_mismatch`: the key was first used with other parameters (a bug in the caller: the
 * key must name one request). `state_conflict`: the payment is not in a state that allows the step.
 */
export interface RejectedOutcome {
  outcome: 'rejected';
  reason: 'invalid_request' | 'idempotency_mismatch' | 'not_found' | 'state_conflict' | 'authentication';
  /** The provider's error code, when it gave one. */
  code: string | null;
  detail: string;
  /** The payment as the provider reported it with the error, when it did. */
  payment: ProviderPayment | null;
}

export interface AuthorizeRequest {
  reference: PaymentReference;
  amountMinor: number;
  /** ISO 4217, as the ledger stores it; connectors convert to the provider's spelling. */
  currency: string;
  /** The provider's token for the payer's instrument (Stripe: a PaymentMethod id). */
  paymentMethod: string;
  idempotencyKey: string;
  description?: string;
  /** Where the payer comes back after a redirect-based authentication, if the caller has a page for it. */
  returnUrl?: string;
}

export type AuthorizeResult =
  | { outcome: 'authorized'; payment: ProviderPayment }
  | {
      outcome: 'requires_action';
      payment: ProviderPayment;
      /** The provider's `next_action`, passed through untouched: the payer's side acts on it. */
      nextAction: unknown;
    }
  | {
      outcome: 'declined';
      /** Null only if the provider declined without creating a payment. */
      payment: ProviderPayment | null;
      declineCode: MappedDeclineCode;
      providerDeclineCode: string;
      /** The issuer may accept a later attempt (on a new charge, with a new key). */
      transient: boolean;
      detail: string;
    }
  | UnknownOutcome
  | RejectedOutcome;

export interface CaptureRequest {
  paymentId: string;
  /** Omitted: capture everything authorized. */
  amountMinor?: number;
  idempotencyKey: string;
}

export type CaptureResult =
  | { outcome: 'captured'; payment: ProviderPayment }
  /** Captured earlier by another request (another key): the caller compares the amount. */
  | { outcome: 'already_captured'; payment: ProviderPayment }
  | UnknownOutcome
  | RejectedOutcome;

export interface VoidRequest {
  paymentId: string;
  idempotencyKey: string;
}

export type VoidResult =
  | { outcome: 'voided'; payment: ProviderPayment }
  /** Voided earlier by another request: nothing to do. */
  | { outcome: 'already_voided'; payment: ProviderPayment }
  | UnknownOutcome
  | RejectedOutcome;

/** Our name for a provider refund: whose, of which charge, and which refund of it. */
export interface RefundReference extends PaymentReference {
  refundId: string;
}

export interface RefundRequest {
  paymentId: string;
  amountMinor: number;
  idempotencyKey: string;
  /**
   * Carried on the provider's refund (Stripe: metadata), so `findRefund` can find it once the key
   * may have been pruned. Without it, the refund can be found only through its key.
   */
  reference?: RefundReference;
}

/** A refund at the provider. */
export interface ProviderRefund {
  /** The provider's id (Stripe: `re_…`). */
  id: string;
  amountMinor: number;
  /** The provider's own status (Stripe: pending, succeeded, failed, canceled, requires_action). */
  providerStatus: string;
}

export type RefundResult = { outcome: 'refunded'; refund: ProviderRefund } | UnknownOutcome | RejectedOutcome;

export interface FindRefundRequest {
  paymentId: string;
  /** Our refund id, as `refund` put it on the provider's refund (RefundRequest.reference). */
  refundId: string;
}

export type FindRefundResult =
  /** The provider's refund of this payment carrying our refund id (the oldest, should there be two). */
  | { outcome: 'found'; refund: ProviderRefund }
  | { outcome: 'not_found' }
  | UnknownOutcome
  | RejectedOutcome;

export interface FindByReferenceRequest {
  reference: PaymentReference;
  /**
   * No payment for this charge can be older than this (when the charge was created, from our
   * records): the lookup reads only what was created since, minus a clock-skew allowance.
   */
  createdNotBeforeMs: number;
}

export type FindByReferenceResult =
  /** Oldest first. More than one means a duplicate the caller must void (it never happens when keys are kept). */
  | { outcome: 'found'; payments: [ProviderPayment, ...ProviderPayment[]] }
  | { outcome: 'not_found' }
  | UnknownOutcome
  | RejectedOutcome;

export interface ListByWindowRequest {
  /** The first creation time read (inclusive). */
  createdFromMs: number;
  /** The last creation time read (inclusive). */
  createdToMs: number;
}

export type ListByWindowResult =
  /** Every payment created in the window that carries our reference (oldest first), and how many were read. */
  | { outcome: 'listed'; payments: ProviderPayment[]; scanned: number }
  | UnknownOutcome
  | RejectedOutcome;

/** A verified provider event, in our words. */
export interface ProviderEvent {
  /** The provider's event id: the deduplication key (providers deliver at least once). */
  id: string;
  /** The provider's event type (Stripe: `payment_intent.succeeded`). */
  type: string;
  createdAtMs: number;
  /** The payment the event is about, when it is about one. */
  payment: ProviderPayment | null;
}

export type VerifyWebhookResult =
  | { outcome: 'verified'; event: ProviderEvent }
  | { outcome: 'refused'; reason: 'bad_signature' | 'too_old' | 'future' | 'malformed'; detail: string }
  /**
   * Signed by the provider's secret, and still not an event (not strict JSON, a field missing or of
   * the wrong type): `field` names the first field at fault (`body`, `id`, `data.object.currency`).
   */
  | { outcome: 'refused'; reason: 'not_an_event'; field: string; detail: string };

export interface VerifyWebhookRequest {
  /** The raw body exactly as received: the signature covers its bytes, not a re-serialisation. */
  payload: string | Buffer;
  /** The provider's signature header (Stripe: `Stripe-Signature`). */
  signatureHeader: string;
  /** When the event arrived; defaults to now. */
  receivedAtMs?: number;
}

export interface PaymentConnector {
  /** A stable name for logs and configuration (`stripe`). */
  readonly provider: string;
  /**
   * How long the provider keeps an idempotency key's saved answer. A retry with the same key is
   * safe only within it; after it the provider may run the request again as new, so the caller
   * must look the payment up by reference first (`keyMayHaveExpired`).
   */
  readonly keyRetentionMs: number;
  /**
   * The longest an authorization may stay open at the provider before it lapses: how far back
   * reconciliation may usefully look (`reconcile --provider --window-hours` is bounded by it).
   */
  readonly longestAuthorizationMs: number;

  authorize(request: AuthorizeRequest): Promise<AuthorizeResult>;
  capture(request: CaptureRequest): Promise<CaptureResult>;
  void(request: VoidRequest): Promise<VoidResult>;
  refund(request: RefundRequest): Promise<RefundResult>;
  findByReference(request: FindByReferenceRequest): Promise<FindByReferenceResult>;
  /**
   * Every payment carrying our reference created in a window, read consistently (reconciliation:
   * the provider's side of every charge, including payments the ledger never learnt of).
   */
  listByWindow(request: ListByWindowRequest): Promise<ListByWindowResult>;
  /**
   * The refund of a payment that carries our refund id, read consistently: what a refund retried
   * past `keyRetentionMs` asks before sending again (the key alone may no longer replay).
   */
  findRefund(request: FindRefundRequest): Promise<FindRefundResult>;
  /**
   * The payment as the provider holds it now, by its id: what an event names is only a claim,
   * and this is how the receiver checks it before anything moves (docs/providers.md, Webhooks).
   */
  retrievePayment(request: RetrievePaymentRequest): Promise<RetrievePaymentResult>;
  verifyWebhook(request: VerifyWebhookRequest): VerifyWebhookResult;
  /**
   * A decline in the caller's words, from the provider's own code (its vocabulary is the
   * connector's). Without a code, the provider's own default for what failed: an attempt
   * (`attempt`), or the payer's authentication (`authentication`, 3-D Secure failed or abandoned).
   */
  declineOf(providerCode: string | null, failed: 'attempt' | 'authentication'): ProviderDecline;
}

export interface RetrievePaymentRequest {
  paymentId: string;
}

export type RetrievePaymentResult = { outcome: 'found'; payment: ProviderPayment } | UnknownOutcome | RejectedOutcome;

/**
 * Margin kept inside the provider's retention window, so a retry that takes a while to arrive is
 * not the one that crosses it: an hour of Stripe's 24, and the same share of a shorter window (a
 * simulator's).
 */
export const keyRetentionMarginMs = 60 * 60 * 1000;
const keyRetentionMarginShare = 1 / 24;

/**
 * Whether a request first sent at `firstSentAtMs` may no longer be replayed by the provider: its
 * key may be pruned, and the same key would then act again as a new request.
 */
export function keyMayHaveExpired(
  connector: Pick<PaymentConnector, 'keyRetentionMs'>,
  firstSentAtMs: number,
  nowMs: number,
): boolean {
  const marginMs = Math.min(keyRetentionMarginMs, connector.keyRetentionMs * keyRetentionMarginShare);
  return nowMs - firstSentAtMs >= connector.keyRetentionMs - marginMs;
}
