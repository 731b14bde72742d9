/**
 * The simulator's payments: PaymentIntents and Refunds with Stripe's state machine for manual
 * capture, answering with Stripe's status codes and error bodies. No HTTP here: the server turns
 * params into calls and answers into replies.
 */
import { stripeLikeId } from './ids.js';
import { testCards } from './test-cards.js';

export interface ApiAnswer {
  status: number;
  body: unknown;
}

export interface SimulatedEvent {
  type: string;
  object: Record<string, unknown>;
}

export interface PaymentIntentRecord {
  id: string;
  amount: number;
  amountCapturable: number;
  amountReceived: number;
  amountRefunded: number;
  currency: string;
  captureMethod: 'manual' | 'automatic';
  status: string;
  paymentMethod: string | null;
  metadata: Record<string, string>;
  description: string | null;
  returnUrl: string | null;
  allowedPaymentMethodTypes: string[];
  nextAction: Record<string, unknown> | null;
  lastPaymentError: Record<string, unknown> | null;
  latestCharge: string | null;
  createdMs: number;
  canceledAtMs: number | null;
  cancellationReason: string | null;
  /** Creation order, to sort payments created in the same millisecond. */
  sequence: number;
}

export interface RefundRecord {
  id: string;
  paymentIntent: string;
  charge: string | null;
  amount: number;
  currency: string;
  status: 'succeeded';
  createdMs: number;
  metadata: Record<string, string>;
}

export type Params = Record<string, unknown>;

/** A successful answer and the events it emits. */
interface Done {
  answer: ApiAnswer;
  events: SimulatedEvent[];
}

export function stripeError(status: number, error: Record<string, unknown>): ApiAnswer {
  return { status, body: { error } };
}

function invalid(message: string, param?: string, code?: string): ApiAnswer {
  return stripeError(400, {
    type: 'invalid_request_error',
    message,
    ...(param ? { param } : {}),
    ...(code ? { code } : {}),
  });
}

function missing(kind: string, id: string, param = 'id'): ApiAnswer {
  return stripeError(404, { type: 'invalid_request_error', code: 'resource_missing', message: `No such ${kind}: '${id}'`, param });
}

/** Params Stripe accepts on each endpoint that the simulator models; any other is refused, as Stripe does. */
const knownParams: Record<string, ReadonlySet<string>> = {
  create: new Set([
    'amount',
    'currency',
    'payment_method',
    'confirm',
    'capture_method',
    'metadata',
    'description',
    'return_url',
    'allowed_payment_method_types',
    'automatic_payment_methods',
    'expand',
  ]),
  capture: new Set(['amount_to_capture', 'metadata', 'expand']),
  cancel: new Set(['cancellation_reason', 'expand']),
  refund: new Set(['payment_intent', 'amount', 'metadata', 'reason', 'expand']),
};

/** Why params cannot run, before anything executes (Stripe saves no idempotent answer for these). */
export function validationError(endpoint: keyof typeof knownParams, params: Params): ApiAnswer | null {
  for (const name of Object.keys(params)) {
    if (!knownParams[endpoint]!.has(name)) return invalid(`Received unknown parameter: ${name}`, name, 'parameter_unknown');
  }
  const integer = (name: string, required: boolean): ApiAnswer | null => {
    const value = params[name];
    if (value === undefined) return required ? invalid(`Missing required param: ${name}.`, name, 'parameter_missing') : null;
    if (typeof value !== 'string' || !/^[0-9]+$/.test(value) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
      return invalid(`Invalid positive integer: ${name}`, name, 'parameter_invalid_integer');
    }
    return null;
  };
  const metadata = params['metadata'];
  if (metadata !== undefined && (typeof metadata !== 'object' || metadata === null || Array.isArray(metadata))) {
    return invalid('Invalid object: metadata', 'metadata');
  }
  if (metadata) {
    for (const [key, value] of Object.entries(metadata)) {
      if (typeof value !== 'string') return invalid(`Invalid string: metadata[${key}]`, `metadata[${key}]`);
    }
  }
  switch (endpoint) {
    case 'create': {
      const amountError = integer('amount', true);
      if (amountError) return amountError;
      const currency = params['currency'];
      if (currency === undefined) return invalid('Missing required param: currency.', 'currency', 'parameter_missing');
      if (typeof currency !== 'string' || !/^[a-z]{3}$/.test(currency)) return invalid(`Invalid currency: ${String(currency)}`, 'currency');
      const capture = params['capture_method'];
      if (capture !== undefined && capture !== 'manual' && capture !== 'automatic') {
        return invalid(`Invalid capture_method: must be one of automatic, manual`, 'capture_method');
      }
      const confirm = params['confirm'];
      if (confirm !== undefined && confirm !== 'true' && confirm !== 'false') return invalid('Invalid boolean: confirm', 'confirm');
      const allowed = params['allowed_payment_method_types'];
      if (allowed !== undefined && (!Array.isArray(allowed) || allowed.some((t) => typeof t !== 'string'))) {
        return invalid('Invalid array: allowed_payment_method_types', 'allowed_payment_method_types');
      }
      return null;
    }
    case 'capture':
      return integer('amount_to_capture', false);
    case 'cancel':
      return null;
    case 'refund': {
      if (typeof params['payment_intent'] !== 'string') return invalid('Missing required param: payment_intent.', 'payment_intent', 'parameter_missing');
      return integer('amount', false);
    }
  }
  return null;
}

export class Payments {
  readonly paymentIntents = new Map<string, PaymentIntentRecord>();
  readonly refunds = new Map<string, RefundRecord>();
  private sequence = 0;

  constructor(private readonly nowMs: () => number) {}

  create(params: Params): Done {
    const confirm = params['confirm'] === 'true';
    const paymentMethod = typeof params['payment_method'] === 'string' ? params['payment_method'] : null;
    const returnUrl = typeof params['return_url'] === 'string' ? params['return_url'] : null;
    const allowed = (params['allowed_payment_method_types'] as string[] | undefined) ?? [];
    const automatic = params['automatic_payment_methods'] as { allow_redirects?: string } | undefined;
    if (confirm && returnUrl === null && allowed.length === 0 && automatic?.allow_redirects !== 'never') {
      // Stripe's rule since payment methods turned automatic: a redirect-based method could be picked.
      return {
        answer: invalid(
          'This PaymentIntent is configured to accept payment methods enabled in your Dashboard, some of which require a return_url. Provide a return_url, or restrict the payment method types.',
          'return_url',
        ),
        events: [],
      };
    }
    if (confirm && paymentMethod === null) {
      return { answer: invalid('You cannot confirm this PaymentIntent because it\'s missing a payment method.', 'payment_method', 'payment_intent_unexpected_state'), events: [] };
    }
    const behaviour = paymentMethod !== null ? testCards[paymentMethod] : undefined;
    if (paymentMethod !== null && behaviour === undefined) {
      return { answer: missing('PaymentMethod', paymentMethod, 'payment_method'), events: [] };
    }
    const amount = Number(params['amount']);
    const intent: PaymentIntentRecord = {
      id: stripeLikeId('pi'),
      amount,
      amountCapturable: 0,
      amountReceived: 0,
      amountRefunded: 0,
      currency: params['currency'] as string,
      captureMethod: params['capture_method'] === 'manual' ? 'manual' : 'automatic',
      status: paymentMethod === null ? 'requires_payment_method' : 'requires_confirmation',
      paymentMethod,
      metadata: { ...((params['metadata'] as Record<string, string> | undefined) ?? {}) },
      description: typeof params['description'] === 'string' ? params['description'] : null,
      returnUrl,
      allowedPaymentMethodTypes: allowed.length > 0 ? allowed : ['card'],
      nextAction: null,
      lastPaymentError: null,
      latestCharge: null,
      createdMs: this.nowMs(),
      canceledAtMs: null,
      cancellationReason: null,
      sequence: ++this.sequence,
    };
    this.paymentIntents.set(intent.id, intent);
    const events: SimulatedEvent[] = [{ type: 'payment_intent.created', object: this.render(intent) }];
    if (!confirm || behaviour === undefined) return { answer: { status: 200, body: this.render(intent) }, events };

    switch (behaviour.kind) {
      case 'authorize':
        this.approve(intent);
        events.push(this.approvalEvent(intent));
        return { answer: { status: 200, body: this.render(intent) }, events };
      case 'authenticate':
        intent.status = 'requires_action';
        intent.nextAction =
          returnUrl !== null
            ? { type: 'redirect_to_url', redirect_to_url: { url: `https://hooks.stripe.com/3d_secure_2/hosted?payment_intent=${intent.id}`, return_url: returnUrl } }
            : {
                type: 'use_stripe_sdk',
                use_stripe_sdk: { type: 'three_d_secure_redirect', stripe_js: `https://hooks.stripe.com/3d_secure_2/hosted?payment_intent=${intent.id}`, source: stripeLikeId('src') },
              };
        events.push({ type: 'payment_intent.requires_action', object: this.render(intent) });
        return { answer: { status: 200, body: this.render(intent) }, events };
      case 'decline': {
        const charge = stripeLikeId('ch');
        intent.latestCharge = charge;
        intent.status = 'requires_payment_method';
        intent.lastPaymentError = {
          type: 'card_error',
          code: behaviour.code,
          decline_code: behaviour.declineCode,
          message: behaviour.message,
          charge,
        };
        events.push({ type: 'payment_intent.payment_failed', object: this.render(intent) });
        return {
          answer: stripeError(402, {
            type: 'card_error',
            code: behaviour.code,
            decline_code: behaviour.declineCode,
            message: behaviour.message,
            charge,
            payment_intent: this.render(intent),
          }),
          events,
        };
      }
    }
  }

  /** What the payer's 3-D Secure challenge decides (an admin call: no API request does this). */
  authenticate(id: string, succeed: boolean): Done {
    const intent = this.paymentIntents.get(id);
    if (!intent) return { answer: missing('payment_intent', id), events: [] };
    if (intent.status !== 'requires_action') return { answer: this.unexpectedState(intent, 'authenticated', ['requires_action']), events: [] };
    intent.nextAction = null;
    if (succeed) {
      this.approve(intent);
      return { answer: { status: 200, body: this.render(intent) }, events: [this.approvalEvent(intent)] };
    }
    intent.status = 'requires_payment_method';
    intent.lastPaymentError = {
      type: 'invalid_request_error',
      code: 'payment_intent_authentication_failure',
      message: 'The provided PaymentMethod has failed authentication.',
    };
    return { answer: { status: 200, body: this.render(intent) }, events: [{ type: 'payment_intent.payment_failed', object: this.render(intent) }] };
  }

  retrieve(id: string): ApiAnswer {
    const intent = this.paymentIntents.get(id);
    return intent ? { status: 200, body: this.render(intent) } : missing('payment_intent', id);
  }

  capture(id: string, params: Params): Done {
    const intent = this.paymentIntents.get(id);
    if (!intent) return { answer: missing('payment_intent', id), events: [] };
    if (intent.status !== 'requires_capture') return { answer: this.unexpectedState(intent, 'captured', ['requires_capture']), events: [] };
    const amount = params['amount_to_capture'] !== undefined ? Number(params['amount_to_capture']) : intent.amountCapturable;
    if (amount > intent.amountCapturable) {
      return {
        answer: invalid(
          `The amount to capture (${amount}) is greater than the amount capturable (${intent.amountCapturable}).`,
          'amount_to_capture',
          'amount_too_large',
        ),
        events: [],
      };
    }
    // A partial capture releases the rest: one capture per PaymentIntent.
    intent.amountReceived = amount;
    intent.amountCapturable = 0;
    intent.status = 'succeeded';
    return { answer: { status: 200, body: this.render(intent) }, events: [{ type: 'payment_intent.succeeded', object: this.render(intent) }] };
  }

  cancel(id: string, params: Params): Done {
    const intent = this.paymentIntents.get(id);
    if (!intent) return { answer: missing('payment_intent', id), events: [] };
    const cancellable = ['requires_payment_method', 'requires_capture', 'requires_confirmation', 'requires_action', 'processing'];
    if (!cancellable.includes(intent.status)) return { answer: this.unexpectedState(intent, 'canceled', cancellable), events: [] };
    intent.status = 'canceled';
    intent.amountCapturable = 0;
    intent.nextAction = null;
    intent.canceledAtMs = this.nowMs();
    intent.cancellationReason = typeof params['cancellation_reason'] === 'string' ? params['cancellation_reason'] : null;
    return { answer: { status: 200, body: this.render(intent) }, events: [{ type: 'payment_intent.canceled', object: this.render(intent) }] };
  }

  refund(params: Params): Done {
    const id = params['payment_intent'] as string;
    const intent = this.paymentIntents.get(id);
    if (!intent) return { answer: missing('payment_intent', id, 'payment_intent'), events: [] };
    if (intent.status !== 'succeeded') {
      return {
        answer: stripeError(400, {
          type: 'invalid_request_error',
          code: 'payment_intent_unexpected_state',
          message: `This PaymentIntent (${intent.id}) does not have a successful charge to refund.`,
          payment_intent: this.render(intent),
        }),
        events: [],
      };
    }
    const refundable = intent.amountReceived - intent.amountRefunded;
    if (refundable === 0) {
      return { answer: stripeError(400, { type: 'invalid_request_error', code: 'charge_already_refunded', message: `Charge ${intent.latestCharge ?? ''} has already been refunded.` }), events: [] };
    }
    const amount = params['amount'] !== undefined ? Number(params['amount']) : refundable;
    if (amount > refundable) {
      return {
        answer: invalid(`Refund amount (${amount}) is greater than unrefunded amount on charge (${refundable})`, 'amount', 'amount_too_large'),
        events: [],
      };
    }
    intent.amountRefunded += amount;
    const refund: RefundRecord = {
      id: stripeLikeId('re'),
      paymentIntent: intent.id,
      charge: intent.latestCharge,
      amount,
      currency: intent.currency,
      status: 'succeeded',
      createdMs: this.nowMs(),
      metadata: { ...((params['metadata'] as Record<string, string> | undefined) ?? {}) },
    };
    this.refunds.set(refund.id, refund);
    const body = this.renderRefund(refund);
    return { answer: { status: 200, body }, events: [{ type: 'refund.created', object: body }] };
  }

  /** A payment's refunds, newest first, as Stripe lists them. */
  refundsOf(paymentIntent: string): RefundRecord[] {
    return [...this.refunds.values()].filter((refund) => refund.paymentIntent === paymentIntent).reverse();
  }

  /** Newest first, as Stripe lists. */
  list(filter: (intent: PaymentIntentRecord) => boolean): PaymentIntentRecord[] {
    return [...this.paymentIntents.values()].filter(filter).sort((a, b) => b.createdMs - a.createdMs || b.sequence - a.sequence);
  }

  private approve(intent: PaymentIntentRecord): void {
    intent.latestCharge = stripeLikeId('ch');
    if (intent.captureMethod === 'manual') {
      intent.status = 'requires_capture';
      intent.amountCapturable = intent.amount;
    } else {
      intent.status = 'succeeded';
      intent.amountReceived = intent.amount;
    }
  }

  private approvalEvent(intent: PaymentIntentRecord): SimulatedEvent {
    const type = intent.status === 'requires_capture' ? 'payment_intent.amount_capturable_updated' : 'payment_intent.succeeded';
    return { type, object: this.render(intent) };
  }

  private unexpectedState(intent: PaymentIntentRecord, verb: string, allowed: string[]): ApiAnswer {
    return stripeError(400, {
      type: 'invalid_request_error',
      code: 'payment_intent_unexpected_state',
      message: `This PaymentIntent could not be ${verb} because it has a status of ${intent.status}. Only a PaymentIntent with one of the following statuses may be ${verb}: ${allowed.join(', ')}.`,
      payment_intent: this.render(intent),
    });
  }

  render(intent: PaymentIntentRecord): Record<string, unknown> {
    return {
      id: intent.id,
      object: 'payment_intent',
      amount: intent.amount,
      amount_capturable: intent.amountCapturable,
      amount_received: intent.amountReceived,
      allowed_payment_method_types: intent.allowedPaymentMethodTypes,
      canceled_at: intent.canceledAtMs === null ? null : Math.floor(intent.canceledAtMs / 1000),
      cancellation_reason: intent.cancellationReason,
      capture_method: intent.captureMethod,
      client_secret: `${intent.id}_secret_${intent.id.slice(3, 15)}`,
      confirmation_method: 'automatic',
      created: Math.floor(intent.createdMs / 1000),
      currency: intent.currency,
      description: intent.description,
      last_payment_error: intent.lastPaymentError,
      latest_charge: intent.latestCharge,
      livemode: false,
      metadata: intent.metadata,
      next_action: intent.nextAction,
      payment_method: intent.paymentMethod,
      payment_method_types: intent.allowedPaymentMethodTypes,
      status: intent.status,
    };
  }

  renderRefund(refund: RefundRecord): Record<string, unknown> {
    return {
      id: refund.id,
      object: 'refund',
      amount: refund.amount,
      charge: refund.charge,
      created: Math.floor(refund.createdMs / 1000),
      currency: refund.currency,
      metadata: refund.metadata,
      payment_intent: refund.paymentIntent,
      reason: null,
      status: refund.status,
    };
  }
}
