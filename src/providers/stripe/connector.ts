/**
 * The Stripe connector: PaymentIntents with manual capture, through the official `stripe` SDK
 * (docs/providers.md). Everything Stripe-specific lives in this file; the rest of the program sees
 * only the PaymentConnector interface.
 */
import Stripe from 'stripe';
import type { ProviderDecline } from '../../domain/provider-declines.js';
import { mapStripeDecline } from './declines.js';
import type {
  AuthorizeRequest,
  AuthorizeResult,
  CaptureRequest,
  CaptureResult,
  FindByReferenceRequest,
  FindByReferenceResult,
  FindRefundRequest,
  FindRefundResult,
  ListByWindowRequest,
  ListByWindowResult,
  PaymentConnector,
  PaymentReference,
  ProviderPayment,
  PaymentStateAtProvider,
  ProviderRefund,
  RefundRequest,
  RefundResult,
  RejectedOutcome,
  RetrievePaymentRequest,
  RetrievePaymentResult,
  UnknownOutcome,
  VerifyWebhookRequest,
  VerifyWebhookResult,
  VoidRequest,
  VoidResult,
} from '../connector.js';
import { decodeStripeEvent, NotAnEvent, stripeStateOf } from './events.js';

/**
 * The API version every request pins. The SDK's types describe only its own latest version, so an
 * SDK upgrade that moves it fails to typecheck here: the version changes by decision, not by upgrade.
 */
export const stripeApiVersion = '2026-10-28.endive' as const;

/** Stripe prunes idempotency keys after 24 hours: a retry after that may act again. */
export const stripeKeyRetentionMs = 24 * 60 * 60 * 1000;

/**
 * Retries the SDK makes itself, always with our key, before the connector answers `unknown`:
 * on a connection error or timeout, 409, and 5xx, honouring Stripe-Should-Retry (stripe 23.x,
 * RequestSender._shouldRetry). Two absorb a blip (a 409 while the first attempt finishes, one
 * dropped connection) without hiding an outage from the caller, whose own retries (the workflow's)
 * are visible and bounded. The SDK also retries a reset connection once even at 0.
 */
export const stripeMaxNetworkRetries = 2;

/**
 * Per attempt. Stripe answers a card authorization in a few seconds at worst; 20 s leaves room for
 * a slow issuer while letting the caller learn of a stuck request well inside an activity's timeout
 * (3 attempts with the SDK's backoff of 0.5-5 s stay under 75 s).
 */
export const stripeRequestTimeoutMs = 20_000;

/** Stripe's own default: an event signed more than 5 minutes before it arrives is refused (replays). */
export const stripeWebhookToleranceMs = 5 * 60 * 1000;

/** Subtracted from a charge's creation time before listing, for clocks that disagree. */
export const findByReferenceClockSkewMs = 5 * 60 * 1000;

/** The most payments one findByReference reads before answering `unknown` (lookup_incomplete). */
export const findByReferenceMaxScanned = 10_000;

/**
 * The most refunds of one payment findRefund reads before answering `unknown` (lookup_incomplete).
 * Each refund takes at least one minor unit of the capture, so only a payment refunded in more
 * pieces than this could reach it.
 */
export const findRefundMaxScanned = 1_000;

/**
 * The most payments one listByWindow reads before answering `unknown` (lookup_incomplete): a
 * reconciliation window with more than this is split into shorter ones by its caller.
 */
export const listByWindowMaxScanned = 100_000;

/** Stripe's largest list page. */
const stripeListPageSize = 100;

export interface StripeEndpoint {
  host: string;
  port: number;
  protocol: 'http' | 'https';
}

export interface StripeConnectorOptions {
  /** A secret key (`sk_test_…` / `sk_live_…`) or a restricted key allowed PaymentIntents and Refunds. */
  apiKey: string;
  /**
   * Webhook signing secrets (`whsec_…`), newest first. During a rotation Stripe signs each event with
   * every live secret, so keeping the old one until its expiry loses nothing.
   */
  webhookSecrets: readonly string[];
  /** Another server speaking Stripe's API (stripe-mock, the simulator); Stripe itself when absent. */
  endpoint?: StripeEndpoint;
  maxNetworkRetries?: number;
  requestTimeoutMs?: number;
  webhookToleranceMs?: number;
  /** Only for a server that prunes keys sooner than Stripe (the simulator). */
  keyRetentionMs?: number;
}

/**
 * 30 days: Stripe's longest authorization (7 days online, up to 30 with extended authorization).
 */
export const stripeLongestAuthorizationMs = 30 * 24 * 60 * 60 * 1000;

export class StripeConnector implements PaymentConnector {
  readonly provider = 'stripe';
  readonly keyRetentionMs: number;
  readonly longestAuthorizationMs = stripeLongestAuthorizationMs;
  private readonly stripe: Stripe;
  private readonly webhookSecrets: readonly string[];
  private readonly webhookToleranceMs: number;

  constructor(options: StripeConnectorOptions) {
    if (options.webhookSecrets.length === 0) throw new Error('StripeConnector needs at least one webhook secret');
    this.keyRetentionMs = options.keyRetentionMs ?? stripeKeyRetentionMs;
    this.webhookSecrets = options.webhookSecrets;
    this.webhookToleranceMs = options.webhookToleranceMs ?? stripeWebhookToleranceMs;
    this.stripe = new Stripe(options.apiKey, {
      apiVersion: stripeApiVersion,
      maxNetworkRetries: options.maxNetworkRetries ?? stripeMaxNetworkRetries,
      timeout: options.requestTimeoutMs ?? stripeRequestTimeoutMs,
      telemetry: false,
      ...(options.endpoint ?? {}),
    });
  }

  async authorize(request: AuthorizeRequest): Promise<AuthorizeResult> {
    let intent: Stripe.PaymentIntent;
    try {
      intent = await this.stripe.paymentIntents.create(
        {
          amount: request.amountMinor,
          currency: request.currency.toLowerCase(),
          payment_method: request.paymentMethod,
          // Cards only: with every method the Dashboard enables, a server-side confirm without a
          // return URL is refused in case the payer's method is redirect-based.
          allowed_payment_method_types: ['card'],
          capture_method: 'manual',
          confirm: true,
          metadata: { tenant: request.reference.tenant, charge_id: request.reference.chargeId },
          ...(request.description !== undefined ? { description: request.description } : {}),
          ...(request.returnUrl !== undefined ? { return_url: request.returnUrl } : {}),
        },
        { idempotencyKey: request.idempotencyKey },
      );
    } catch (err) {
      if (err instanceof Stripe.errors.StripeCardError) {
        const payment = err.payment_intent ? toPayment(err.payment_intent) : null;
        return {
          outcome: 'declined',
          payment,
          ...mapStripeDecline(err.decline_code ?? err.code),
          detail: err.message,
        };
      }
      return classifyError(err);
    }
    const payment = toPayment(intent);
    switch (payment.state) {
      case 'authorized':
        return { outcome: 'authorized', payment };
      case 'requires_action':
        return { outcome: 'requires_action', payment, nextAction: intent.next_action };
      case 'declined':
        // Confirmed without a card error but left without a payment method: an authentication failed.
        return {
          outcome: 'declined',
          payment,
          ...mapStripeDecline(payment.lastDeclineCode),
          detail: intent.last_payment_error?.message ?? `PaymentIntent ${intent.id} needs a new payment method`,
        };
      case 'processing':
        return { outcome: 'unknown', reason: 'processing', detail: `PaymentIntent ${intent.id} is ${intent.status}` };
      case 'captured':
      case 'voided':
        return rejectedState(payment, `PaymentIntent ${intent.id} is already ${intent.status}`);
    }
  }

  async capture(request: CaptureRequest): Promise<CaptureResult> {
    try {
      const intent = await this.stripe.paymentIntents.capture(
        request.paymentId,
        request.amountMinor !== undefined ? { amount_to_capture: request.amountMinor } : {},
        { idempotencyKey: request.idempotencyKey },
      );
      return { outcome: 'captured', payment: toPayment(intent) };
    } catch (err) {
      const outcome = classifyError(err);
      if (outcome.outcome === 'rejected' && outcome.payment?.state === 'captured') {
        return { outcome: 'already_captured', payment: outcome.payment };
      }
      return outcome;
    }
  }

  async void(request: VoidRequest): Promise<VoidResult> {
    try {
      const intent = await this.stripe.paymentIntents.cancel(request.paymentId, {}, { idempotencyKey: request.idempotencyKey });
      return { outcome: 'voided', payment: toPayment(intent) };
    } catch (err) {
      const outcome = classifyError(err);
      if (outcome.outcome === 'rejected' && outcome.payment?.state === 'voided') {
        return { outcome: 'already_voided', payment: outcome.payment };
      }
      return outcome;
    }
  }

  async refund(request: RefundRequest): Promise<RefundResult> {
    try {
      const refund = await this.stripe.refunds.create(
        {
          payment_intent: request.paymentId,
          amount: request.amountMinor,
          ...(request.reference
            ? { metadata: { tenant: request.reference.tenant, charge_id: request.reference.chargeId, refund_id: request.reference.refundId } }
            : {}),
        },
        { idempotencyKey: request.idempotencyKey },
      );
      return { outcome: 'refunded', refund: toRefund(refund) };
    } catch (err) {
      return classifyError(err);
    }
  }

  /**
   * Lists the payment's refunds (the list endpoint: read-after-write consistent, like
   * findByReference's) and matches our refund id in their metadata.
   */
  async findRefund(request: FindRefundRequest): Promise<FindRefundResult> {
    const found: Stripe.Refund[] = [];
    let scanned = 0;
    try {
      for await (const refund of this.stripe.refunds.list({ payment_intent: request.paymentId, limit: stripeListPageSize })) {
        scanned += 1;
        if (refund.metadata?.['refund_id'] === request.refundId) found.push(refund);
        if (scanned >= findRefundMaxScanned) {
          return { outcome: 'unknown', reason: 'lookup_incomplete', detail: `read ${scanned} refunds of ${request.paymentId} without reaching the end` };
        }
      }
    } catch (err) {
      return classifyError(err);
    }
    // Stripe lists newest first; the oldest is the one our first request made.
    const oldest = found.sort((a, b) => a.created - b.created)[0];
    return oldest ? { outcome: 'found', refund: toRefund(oldest) } : { outcome: 'not_found' };
  }

  /**
   * Reads the list endpoint, not search: Stripe's list is read-after-write consistent, so a payment
   * created a moment ago (the very case this lookup exists for: an answer lost after commit) is
   * there; search is eventually consistent (Stripe documents up to a minute of lag, more during an
   * outage) and is not offered in every region. List cannot filter on metadata, so the window
   * since the charge's creation bounds the scan instead.
   */
  async findByReference(request: FindByReferenceRequest): Promise<FindByReferenceResult> {
    const createdGteS = Math.floor((request.createdNotBeforeMs - findByReferenceClockSkewMs) / 1000);
    const found: ProviderPayment[] = [];
    let scanned = 0;
    try {
      for await (const intent of this.stripe.paymentIntents.list({ created: { gte: createdGteS }, limit: stripeListPageSize })) {
        scanned += 1;
        if (intent.metadata['tenant'] === request.reference.tenant && intent.metadata['charge_id'] === request.reference.chargeId) {
          found.push(toPayment(intent));
        }
        if (scanned >= findByReferenceMaxScanned) {
          return {
            outcome: 'unknown',
            reason: 'lookup_incomplete',
            detail: `read ${scanned} payments created since ${new Date(createdGteS * 1000).toISOString()} without reaching the end`,
          };
        }
      }
    } catch (err) {
      return classifyError(err);
    }
    if (found.length === 0) return { outcome: 'not_found' };
    found.sort((a, b) => a.createdAtMs - b.createdAtMs);
    return { outcome: 'found', payments: found as [ProviderPayment, ...ProviderPayment[]] };
  }

  /** The list endpoint, for the reason findByReference gives: consistent, unlike search. */
  async listByWindow(request: ListByWindowRequest): Promise<ListByWindowResult> {
    const created = { gte: Math.floor(request.createdFromMs / 1000), lte: Math.floor(request.createdToMs / 1000) };
    const payments: ProviderPayment[] = [];
    let scanned = 0;
    try {
      for await (const intent of this.stripe.paymentIntents.list({ created, limit: stripeListPageSize })) {
        scanned += 1;
        if (referenceOf(intent.metadata)) payments.push(toPayment(intent));
        if (scanned >= listByWindowMaxScanned) {
          return {
            outcome: 'unknown',
            reason: 'lookup_incomplete',
            detail: `read ${scanned} payments created from ${new Date(created.gte * 1000).toISOString()} without reaching the end: use a shorter window`,
          };
        }
      }
    } catch (err) {
      return classifyError(err);
    }
    payments.sort((a, b) => a.createdAtMs - b.createdAtMs);
    return { outcome: 'listed', payments, scanned };
  }

  async retrievePayment(request: RetrievePaymentRequest): Promise<RetrievePaymentResult> {
    try {
      return { outcome: 'found', payment: toPayment(await this.stripe.paymentIntents.retrieve(request.paymentId)) };
    } catch (err) {
      return classifyError(err);
    }
  }

  /**
   * The signature first (any configured secret, Stripe's own check of the bytes), then its
   * timestamp both ways (Stripe's check refuses only the old: a `t` further ahead of our clock than
   * the tolerance is refused here too, as deposit callbacks refuse it), then the body, decoded
   * strictly and checked field by field (stripe-events.ts): a signed body that is not an event is
   * refused naming the field, never parsed leniently.
   */
  verifyWebhook(request: VerifyWebhookRequest): VerifyWebhookResult {
    const receivedAtMs = request.receivedAtMs ?? Date.now();
    const toleranceS = Math.floor(this.webhookToleranceMs / 1000);
    if (!this.verifiedWithAnySecret(request, toleranceS, receivedAtMs)) {
      // Tell a stale event from a forged one: the same check without the age limit.
      if (this.verifiedWithAnySecret(request, 0, receivedAtMs)) {
        return { outcome: 'refused', reason: 'too_old', detail: `signed more than ${this.webhookToleranceMs} ms before it arrived` };
      }
      if (!/(^|,)t=\d+/.test(request.signatureHeader) || !/(^|,)v1=[0-9a-f]+/.test(request.signatureHeader)) {
        return { outcome: 'refused', reason: 'malformed', detail: 'Stripe-Signature lacks t= or v1=' };
      }
      return { outcome: 'refused', reason: 'bad_signature', detail: 'no v1 signature matches any configured webhook secret' };
    }
    // Verified, so `t` is the signer's: exactly one, or the header is not Stripe's.
    const timestamps = [...request.signatureHeader.matchAll(/(?:^|,)t=(\d+)/g)];
    if (timestamps.length !== 1) return { outcome: 'refused', reason: 'malformed', detail: 'Stripe-Signature carries more than one t=' };
    const aheadMs = Number(timestamps[0]![1]) * 1000 - receivedAtMs;
    if (aheadMs > this.webhookToleranceMs) {
      return {
        outcome: 'refused',
        reason: 'future',
        detail: `signed ${Math.floor(aheadMs / 1000)} s in the future; at most ${this.webhookToleranceMs} ms of clock skew is accepted: check the sender's clock`,
      };
    }
    try {
      const body = typeof request.payload === 'string' ? Buffer.from(request.payload, 'utf8') : request.payload;
      return { outcome: 'verified', event: decodeStripeEvent(body) };
    } catch (err) {
      if (err instanceof NotAnEvent) return { outcome: 'refused', reason: 'not_an_event', field: err.field, detail: err.problem };
      throw err;
    }
  }

  declineOf(providerCode: string | null, failed: 'attempt' | 'authentication'): ProviderDecline {
    // Stripe's last_payment_error after a failed or abandoned 3-D Secure is authentication_required.
    return mapStripeDecline(providerCode ?? (failed === 'authentication' ? 'authentication_required' : null));
  }

  private verifiedWithAnySecret(request: VerifyWebhookRequest, toleranceS: number, receivedAtMs: number): boolean {
    const signature = this.stripe.webhooks.signature;
    if (!signature) throw new Error('the stripe SDK offers no webhook signature helper');
    for (const secret of this.webhookSecrets) {
      try {
        return signature.verifyHeader(request.payload, request.signatureHeader, secret, toleranceS, undefined, receivedAtMs);
      } catch (err) {
        if (!(err instanceof Stripe.errors.StripeSignatureVerificationError)) throw err;
      }
    }
    return false;
  }
}

function referenceOf(metadata: Stripe.Metadata | null | undefined): PaymentReference | null {
  const tenant = metadata?.['tenant'];
  const chargeId = metadata?.['charge_id'];
  return tenant && chargeId ? { tenant, chargeId } : null;
}

export function toPayment(intent: Stripe.PaymentIntent): ProviderPayment {
  return {
    id: intent.id,
    state: stripeStateOf(intent.status),
    providerStatus: intent.status,
    reference: referenceOf(intent.metadata),
    amountMinor: intent.amount,
    amountCapturableMinor: intent.amount_capturable,
    amountCapturedMinor: intent.amount_received,
    currency: intent.currency.toUpperCase(),
    createdAtMs: intent.created * 1000,
    nextAction: intent.next_action ?? null,
    lastDeclineCode: intent.last_payment_error?.decline_code ?? intent.last_payment_error?.code ?? null,
  };
}

function toRefund(refund: Stripe.Refund): ProviderRefund {
  return { id: refund.id, amountMinor: refund.amount, providerStatus: refund.status ?? 'unknown' };
}

function rejectedState(payment: ProviderPayment, detail: string): RejectedOutcome {
  return { outcome: 'rejected', reason: 'state_conflict', code: 'payment_intent_unexpected_state', detail, payment };
}

/**
 * Sorts a failed call into "may have happened, retry with the same key" and "final". Anything that
 * is not the SDK's error is a bug in this program and is thrown on.
 */
function classifyError(err: unknown): UnknownOutcome | RejectedOutcome {
  if (!(err instanceof Stripe.errors.StripeError)) throw err;
  if (err instanceof Stripe.errors.StripeConnectionError) {
    const code = (err.detail as { code?: string } | undefined)?.code;
    return { outcome: 'unknown', reason: code === 'ETIMEDOUT' ? 'timeout' : 'connection_lost', detail: err.message };
  }
  const status = err.statusCode ?? 0;
  if (status === 409) return { outcome: 'unknown', reason: 'key_in_use', detail: err.message };
  if (status === 429) return { outcome: 'unknown', reason: 'rate_limited', detail: err.message };
  // No status: the answer could not be read (a body that is not JSON): the request may have run.
  if (status >= 500 || status === 0) return { outcome: 'unknown', reason: 'server_error', detail: err.message };
  const payment = err.payment_intent ? toPayment(err.payment_intent) : null;
  const code = err.code ?? null;
  if (err instanceof Stripe.errors.StripeIdempotencyError) {
    return { outcome: 'rejected', reason: 'idempotency_mismatch', code, detail: err.message, payment };
  }
  if (status === 401 || status === 403) return { outcome: 'rejected', reason: 'authentication', code, detail: err.message, payment };
  if (status === 404 || code === 'resource_missing') return { outcome: 'rejected', reason: 'not_found', code, detail: err.message, payment };
  if (code === 'payment_intent_unexpected_state' || code === 'charge_already_refunded' || code === 'charge_already_captured') {
    return { outcome: 'rejected', reason: 'state_conflict', code, detail: err.message, payment };
  }
  return { outcome: 'rejected', reason: 'invalid_request', code, detail: err.message, payment };
}
