/**
 * A Stripe event's body, once its signature verified, to the fields the receiver reads, or the
 * first field that makes it not an event. Pure: no I/O.
 *
 * A valid signature says who sent the bytes, not that they are an event: the body goes through the
 * strict JSON decoder every other body goes through (duplicate members, `__proto__`, nesting beyond
 * `jsonMaxDepth`, non-integer numbers refused), then every field the receiver reads is checked here
 * for type and bounds. What fails is a refusal naming the field (answered 400), never an exception
 * deeper in, which the provider would have seen as a 500 and redelivered for days.
 *
 * Only what is read is checked: an event carries many more fields (`livemode`, `request`, a
 * PaymentIntent's `payment_method_types`), and those are left as they are. A payment in an event is
 * a snapshot that is never acted on: the receiver fetches the payment itself before anything moves.
 */
import { decodeStrictJson, StrictJsonError } from '../../support/strict-json.js';
import type { PaymentReference, ProviderEvent, PaymentStateAtProvider } from '../connector.js';

/** Printable ASCII, 1-255 characters: ids and types as the receiver's table keeps them. */
const idPattern = /^[\x21-\x7e]{1,255}$/;
/** Stripe spells currencies as three lowercase letters. */
const currencyPattern = /^[a-z]{3}$/;
/** Stripe allows 50 metadata keys of 40 characters with values of 500; a little room above. */
export const stripeEventMetadataMaxKeys = 50;
export const stripeEventMetadataKeyMaxLength = 40;
export const stripeEventMetadataValueMaxLength = 500;
/** The largest amount Stripe takes in any currency (99,999,999.99 in a two-decimal currency) is far below this. */
const amountMinorMax = Number.MAX_SAFE_INTEGER;

/** Why a verified body is not an event: the field at fault (`id`, `data.object.metadata.tenant`) and what is wrong. */
export class NotAnEvent extends Error {
  constructor(
    readonly field: string,
    readonly problem: string,
  ) {
    super(`${field}: ${problem}`);
    this.name = 'NotAnEvent';
  }
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function objectAt(parent: Json, name: string, path: string): Json {
  const value = parent[name];
  if (!isObject(value)) throw new NotAnEvent(path, value === undefined ? 'missing: must be an object' : 'must be an object');
  return value;
}

function idAt(parent: Json, name: string, path: string): string {
  const value = parent[name];
  if (typeof value !== 'string') throw new NotAnEvent(path, value === undefined ? 'missing: must be a string' : 'must be a string');
  if (!idPattern.test(value)) throw new NotAnEvent(path, 'must be 1-255 printable ASCII characters');
  return value;
}

function integerAt(parent: Json, name: string, path: string, min: number, max: number): number {
  const value = parent[name];
  if (!Number.isSafeInteger(value)) throw new NotAnEvent(path, value === undefined ? 'missing: must be an integer' : 'must be an integer');
  const n = value as number;
  if (n < min || n > max) throw new NotAnEvent(path, `must be within ${min}..${max}`);
  return n;
}

/** No control characters (NUL among them): nothing of ours ever carries one, and the ledger refuses NUL. */
const controlCharacters = /[\u0000-\u001f\u007f]/;

function metadataOf(intent: Json, path: string): Record<string, string> {
  const value = intent['metadata'];
  if (value === undefined || value === null) return {};
  if (!isObject(value)) throw new NotAnEvent(path, 'must be an object of strings');
  const entries = Object.entries(value);
  if (entries.length > stripeEventMetadataMaxKeys) throw new NotAnEvent(path, `at most ${stripeEventMetadataMaxKeys} keys`);
  const metadata: Record<string, string> = {};
  for (const [key, item] of entries) {
    const at = `${path}.${key}`;
    if (key.length > stripeEventMetadataKeyMaxLength || controlCharacters.test(key)) {
      throw new NotAnEvent(at, `key must be at most ${stripeEventMetadataKeyMaxLength} characters without control characters`);
    }
    if (typeof item !== 'string') throw new NotAnEvent(at, 'must be a string');
    if (item.length > stripeEventMetadataValueMaxLength) throw new NotAnEvent(at, `at most ${stripeEventMetadataValueMaxLength} characters`);
    if (controlCharacters.test(item)) throw new NotAnEvent(at, 'must not contain control characters (NUL among them)');
    metadata[key] = item;
  }
  return metadata;
}

/** A PaymentIntent's status in our words (also the connector's, for the payments it reads). */
export function stripeStateOf(status: string): PaymentStateAtProvider {
  // We always confirm with a payment method: back to "needs a payment method" means the attempt failed;
  // requires_confirmation, processing and statuses newer than this code are not decided yet.
  switch (status) {
    case 'requires_capture':
      return 'authorized';
    case 'requires_action':
      return 'requires_action';
    case 'succeeded':
      return 'captured';
    case 'canceled':
      return 'voided';
    case 'requires_payment_method':
      return 'declined';
    default:
      return 'processing';
  }
}

function optionalTextAt(parent: Json, name: string, path: string): string | null {
  const value = parent[name];
  if (value === undefined || value === null) return null;
  if (typeof value !== 'string' || value.length > 255 || controlCharacters.test(value)) {
    throw new NotAnEvent(path, 'must be null or a string of at most 255 characters without control characters');
  }
  return value;
}

/** The PaymentIntent an event carries, with every field the receiver reads checked. */
function paymentOf(intent: Json): ProviderEvent['payment'] {
  const at = (name: string) => `data.object.${name}`;
  const id = idAt(intent, 'id', at('id'));
  const status = intent['status'];
  if (typeof status !== 'string' || !/^[a-z_]{1,64}$/.test(status)) throw new NotAnEvent(at('status'), 'must be a Stripe PaymentIntent status');
  const currency = intent['currency'];
  if (typeof currency !== 'string' || !currencyPattern.test(currency)) throw new NotAnEvent(at('currency'), 'must be a three-letter lowercase currency code');
  const metadata = metadataOf(intent, at('metadata'));
  const reference: PaymentReference | null =
    metadata['tenant'] && metadata['charge_id'] ? { tenant: metadata['tenant'], chargeId: metadata['charge_id'] } : null;
  const lastError = intent['last_payment_error'];
  if (lastError !== undefined && lastError !== null && !isObject(lastError)) throw new NotAnEvent(at('last_payment_error'), 'must be null or an object');
  const lastDeclineCode = isObject(lastError)
    ? (optionalTextAt(lastError, 'decline_code', at('last_payment_error.decline_code')) ??
      optionalTextAt(lastError, 'code', at('last_payment_error.code')))
    : null;
  const nextAction = intent['next_action'];
  if (nextAction !== undefined && nextAction !== null && !isObject(nextAction)) throw new NotAnEvent(at('next_action'), 'must be null or an object');
  return {
    id,
    state: stripeStateOf(status),
    providerStatus: status,
    reference,
    amountMinor: integerAt(intent, 'amount', at('amount'), 0, amountMinorMax),
    amountCapturableMinor: integerAt(intent, 'amount_capturable', at('amount_capturable'), 0, amountMinorMax),
    amountCapturedMinor: integerAt(intent, 'amount_received', at('amount_received'), 0, amountMinorMax),
    currency: currency.toUpperCase(),
    createdAtMs: integerAt(intent, 'created', at('created'), 0, Number.MAX_SAFE_INTEGER / 1000) * 1000,
    nextAction: nextAction ?? null,
    lastDeclineCode,
  };
}

/**
 * The verified body as an event, or a NotAnEvent naming the field. The strict decoder's refusals
 * become NotAnEvent with its field (`body`, or the member at fault).
 */
export function decodeStripeEvent(body: Uint8Array): ProviderEvent {
  let value: unknown;
  try {
    value = decodeStrictJson(body);
  } catch (error) {
    if (error instanceof StrictJsonError) throw new NotAnEvent(error.field, error.problem);
    throw error;
  }
  if (!isObject(value)) throw new NotAnEvent('body', 'must be a JSON object (an event)');
  if (value['object'] !== 'event') throw new NotAnEvent('object', 'must be "event"');
  const id = idAt(value, 'id', 'id');
  const type = idAt(value, 'type', 'type');
  const createdS = integerAt(value, 'created', 'created', 0, Number.MAX_SAFE_INTEGER / 1000);
  const data = objectAt(value, 'data', 'data');
  const object = objectAt(data, 'object', 'data.object');
  // Only a PaymentIntent is read further; another object (or one that does not say) is not a payment.
  const kind = object['object'];
  if (kind !== undefined && (typeof kind !== 'string' || !idPattern.test(kind))) throw new NotAnEvent('data.object.object', 'must name the object type');
  return { id, type, createdAtMs: createdS * 1000, payment: kind === 'payment_intent' ? paymentOf(object) : null };
}
