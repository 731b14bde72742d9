import { z } from 'zod';
import { chargeStatuses, type ChargeRequest, type ChargeStatus } from '../domain/charge.js';
import { captureModes } from '../domain/capture-modes.js';
import { eventObjectTypes, eventTypes } from '../domain/events.js';
import { currencyPattern, limits, textPatterns } from '../domain/limits.js';
import {
  clearingAccountId,
  paymentMethodIdMaxLength,
  paymentMethodIdPattern,
  providerNames,
  returnUrlMaxLength,
  type ProviderName,
} from '../domain/providers.js';
import { ValidationError, type FieldError } from '../domain/errors.js';

/**
 * The contract's rules for everything a caller sends, in one place: every surface (HTTP body,
 * path and query, MCP arguments, CLI flags) goes through these functions, so a value is either
 * refused here, naming its field, or stored exactly as sent. Nothing below does I/O: a refusal
 * costs microseconds and happens before anything is recorded or started.
 */

// With the `u` flag, \p{Cs} matches only surrogates that are not part of a pair: exactly the
// code units that make a string ill-formed (String.prototype.isWellFormed, without needing the
// ES2024 typings).
const loneSurrogate = /\p{Cs}/u;
const forbiddenInLine = new RegExp(`[${textPatterns.singleLineForbidden}]`, 'u');
const forbiddenInText = new RegExp(`[${textPatterns.multiLineForbidden}]`, 'u');

function codePoint(text: string, index: number): string {
  return `U+${(text.codePointAt(index) ?? 0).toString(16).toUpperCase().padStart(4, '0')}`;
}

/** Position in characters (code points), as a person counts them. */
function positionOf(text: string, index: number): number {
  return [...text.slice(0, index)].length;
}

export interface TextRule {
  /** In characters (code points). */
  minLength?: number;
  maxLength: number;
  /** Tab, line feed and carriage return allowed (a description); otherwise no control character at all. */
  multiLine?: boolean;
}

/** Why `text` breaks the contract's text rules, or null when it does not. */
export function textProblem(text: string, rule: TextRule): string | null {
  const surrogate = loneSurrogate.exec(text);
  if (surrogate) {
    return `must be valid Unicode: lone surrogate ${codePoint(text, surrogate.index)} at position ${positionOf(text, surrogate.index)}`;
  }
  const control = (rule.multiLine ? forbiddenInText : forbiddenInLine).exec(text);
  if (control) {
    const allowed = rule.multiLine ? ' (tab and line breaks are allowed)' : '';
    return `must not contain control characters${allowed}: ${codePoint(text, control.index)} at position ${positionOf(text, control.index)}`;
  }
  const length = [...text].length;
  const minLength = rule.minLength ?? 0;
  if (length < minLength) return minLength === 1 ? 'must not be empty' : `must be at least ${minLength} characters`;
  if (length > rule.maxLength) return `is ${length} characters long; at most ${rule.maxLength}`;
  return null;
}

/** `null` where the contract wants a value or nothing: absent means default, null is an error. */
const notNull = (expected: string) => (issue: { input?: unknown }) =>
  issue.input === null ? `must be ${expected}, or left out: null is not a value` : `must be ${expected}`;

/** A free-text field: the text rules, with lengths and pattern stated for the OpenAPI document. */
export function textSchema(rule: TextRule) {
  return z
    .string({ error: notNull('a string') })
    .superRefine((text, context) => {
      const problem = textProblem(text, rule);
      if (problem) context.addIssue({ code: 'custom', message: problem });
    })
    .meta({
      ...(rule.minLength ? { minLength: rule.minLength } : {}),
      maxLength: rule.maxLength,
      pattern: rule.multiLine ? textPatterns.multiLine : textPatterns.singleLine,
    });
}

/** A value made of allowed characters only: the message names the first character that is not. */
function charactersProblem(value: string, allowedChar: RegExp, maxLength: number, what: string): string | null {
  if (value.length === 0) return 'must not be empty';
  const chars = [...value];
  if (chars.length > maxLength) return `is ${chars.length} characters long; at most ${maxLength}`;
  const bad = chars.findIndex((char) => !allowedChar.test(char));
  if (bad < 0) return null;
  return `must be ${what}: ${codePoint(chars[bad]!, 0)} at position ${bad} is not allowed`;
}

const accountIdRule = 'letters, digits, "_", ".", ":" or "-" (1-64 characters)';
const paymentMethodIdRule = `letters, digits or "_" (1-${paymentMethodIdMaxLength} characters), the provider's token such as "pm_card_visa"`;
const idempotencyKeyRule = 'visible ASCII characters only (no spaces or control characters), 1-255 of them';

export function accountIdProblem(id: string): string | null {
  return charactersProblem(id, /^[A-Za-z0-9_.:-]$/, limits.accountIdMaxLength, accountIdRule);
}

export function paymentMethodIdProblem(id: string): string | null {
  const problem = charactersProblem(id, /^[A-Za-z0-9_]$/, paymentMethodIdMaxLength, paymentMethodIdRule);
  // The domain's pattern is what the ledger and the provider's request rely on: agree with it.
  if (problem === null && !paymentMethodIdPattern.test(id)) return `must be ${paymentMethodIdRule}`;
  return problem;
}

export function idempotencyKeyProblem(key: string): string | null {
  return charactersProblem(key, /^[\x21-\x7e]$/, limits.idempotencyKeyMaxLength, idempotencyKeyRule);
}

export const accountIdSchema = z
  .string({ error: notNull('a string') })
  .superRefine((id, context) => {
    const problem = accountIdProblem(id);
    if (problem) context.addIssue({ code: 'custom', message: problem });
  })
  .meta({ minLength: 1, maxLength: limits.accountIdMaxLength, pattern: limits.accountIdPattern.source });

export const idempotencyKeySchema = z
  .string({ error: notNull('a string') })
  .superRefine((key, context) => {
    const problem = idempotencyKeyProblem(key);
    if (problem) context.addIssue({ code: 'custom', message: problem });
  })
  .meta({ minLength: 1, maxLength: limits.idempotencyKeyMaxLength, pattern: '^[\\x21-\\x7e]{1,255}$' });

export const paymentMethodIdSchema = z
  .string({ error: notNull('a string') })
  .superRefine((id, context) => {
    const problem = paymentMethodIdProblem(id);
    if (problem) context.addIssue({ code: 'custom', message: problem });
  })
  .meta({ minLength: 1, maxLength: paymentMethodIdMaxLength, pattern: paymentMethodIdPattern.source });

/**
 * Why `text` cannot be a provider charge's return_url, or null. The payer's browser is sent there
 * with the provider's answer in the query (Stripe appends `payment_intent`,
 * `payment_intent_client_secret` and `redirect_status`), so it must be an https page: never plain
 * http, where that secret would travel in the clear, and never with credentials, which the provider
 * would keep and show in the redirect. The value is sent to the provider exactly as given, so it
 * must already be a URL as written (no spaces or backslashes a parser would silently rewrite).
 */
export function returnUrlProblem(text: string): string | null {
  const textual = textProblem(text, { minLength: 1, maxLength: returnUrlMaxLength });
  if (textual) return textual;
  const blank = /[\s\\]/u.exec(text);
  if (blank) {
    return `must be a URL as sent, without spaces or backslashes (percent-encode them): ${codePoint(text, blank.index)} at position ${positionOf(text, blank.index)}`;
  }
  if (!/^https:\/\//i.test(text)) return 'must be an https URL (https://…): the payer comes back there with the provider\'s answer';
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'must be an absolute https URL';
  }
  // The authority as written: WHATWG parsing drops an empty "user@" part, which the provider would still receive.
  const authority = text.slice('https://'.length).split(/[/?#]/u, 1)[0] ?? '';
  if (url.username !== '' || url.password !== '' || authority.includes('@')) {
    return 'must not carry credentials (user:password@): the provider shows the URL to the payer';
  }
  if (url.hostname === '') return 'must name a host';
  return null;
}

export const returnUrlSchema = z
  .string({ error: notNull('a string') })
  .superRefine((text, context) => {
    const problem = returnUrlProblem(text);
    if (problem) context.addIssue({ code: 'custom', message: problem });
  })
  .meta({ minLength: 1, maxLength: returnUrlMaxLength, format: 'uri', pattern: '^[Hh][Tt][Tt][Pp][Ss]://[^\\s@\\\\/?#]+([/?#][^\\s\\\\]*)?$' });

export const providerNameSchema = z.enum(providerNames, { error: notNull(`one of ${providerNames.map((name) => `"${name}"`).join(', ')}`) });

/** The provider a charge naming a payment method goes to when it names none: the first one listed. */
export const defaultProviderName: ProviderName = providerNames[0];

const knownCurrencies = new Set(Intl.supportedValuesOf('currency'));

export function amountSchema(amountMinorMax: number) {
  return z
    .number({ error: notNull('an integer number of minor units (cents)') })
    .int('must be an integer number of minor units (cents)')
    .min(limits.amountMinorMin, `must be at least ${limits.amountMinorMin}`)
    .max(amountMinorMax, `must be at most ${amountMinorMax}`);
}

export const currencySchema = z
  .string({ error: notNull('a string') })
  .regex(currencyPattern, 'must be an upper-case ISO 4217 code such as "USD"')
  .refine((code) => knownCurrencies.has(code), 'is not an ISO 4217 currency')
  .meta({ enum: [...knownCurrencies].sort() });

export const orderIdSchema = textSchema({ minLength: 1, maxLength: limits.orderIdMaxLength });
export const descriptionSchema = textSchema({ maxLength: limits.descriptionMaxLength, multiLine: true });
/**
 * JSON.parse makes `"__proto__"` an own property, but a schema parser copying the object skips it
 * (assigning it would set the copy's prototype), so the key would silently vanish. Refused before
 * parsing, so that what is stored is what was sent.
 */
export function refusingPrototypeKey<S extends z.ZodType>(schema: S) {
  return z.preprocess((value, context) => {
    if (typeof value === 'object' && value !== null && Object.hasOwn(value, '__proto__')) {
      context.addIssue({ code: 'custom', message: 'key is a reserved name', path: ['__proto__'] });
    }
    return value;
  }, schema);
}

export const metadataSchema = refusingPrototypeKey(
  z
    .record(
      textSchema({ minLength: 1, maxLength: limits.metadataKeyMaxLength }),
      textSchema({ maxLength: limits.metadataValueMaxLength }),
      { error: notNull('an object of string values') },
    )
    .refine((m) => Object.keys(m).length <= limits.metadataMaxKeys, `at most ${limits.metadataMaxKeys} keys`)
    .meta({ maxProperties: limits.metadataMaxKeys }),
);

/** The create-charge fields, for the HTTP body and the MCP tool alike. */
export function chargeFieldSchemas(amountMinorMax: number) {
  return {
    order_id: orderIdSchema,
    payer_account_id: accountIdSchema
      .optional()
      .describe('the account to debit, in this ledger; exactly one of payer_account_id and payment_method'),
    payment_method: paymentMethodIdSchema
      .optional()
      .describe(
        "the payer's instrument at a payment provider (Stripe: a PaymentMethod id such as pm_card_visa), " +
          'charged through the provider instead of a ledger account; exactly one of payer_account_id and payment_method',
      ),
    provider: providerNameSchema
      .optional()
      .describe(`the provider payment_method belongs to (default "${defaultProviderName}"); only with payment_method`),
    return_url: returnUrlSchema
      .optional()
      .describe(
        `where the provider sends the payer back after authenticating (3-D Secure): an https page of yours, at most ${returnUrlMaxLength} ` +
          'characters, no credentials; only with payment_method. With it, a charge that needs the payer answers next_action ' +
          '{type: "redirect_to_url", redirect_to_url: {url, return_url}}: a URL a person opens in a browser',
      ),
    payee_account_id: accountIdSchema,
    amount: amountSchema(amountMinorMax),
    currency: currencySchema,
    capture: z.enum(captureModes, { error: notNull('"automatic" or "manual"') }).default('automatic'),
    description: descriptionSchema.optional(),
    metadata: metadataSchema.optional(),
  };
}

/** The create-charge body as it travels on the wire (snake_case, like most payment APIs). */
export function chargeRequestSchema(amountMinorMax: number) {
  return z
    .object(chargeFieldSchemas(amountMinorMax))
    .strict()
    .superRefine((body, context) => {
      for (const issue of payerProblems(body)) context.addIssue({ code: 'custom', ...issue });
    }, { when: ({ value }) => isObject(value) })
    .refine((body) => body.payer_account_id === undefined || body.payer_account_id !== body.payee_account_id, {
      path: ['payee_account_id'],
      message: 'must differ from payer_account_id',
    })
    .meta({
      description:
        'Exactly one of payer_account_id (a ledger account pays) and payment_method (the payer pays through a ' +
        `provider; provider, default "${defaultProviderName}", only with it) is required: both, or neither, is refused (400).`,
      // JSON Schema can state both rules, so schema-driven clients see them too.
      oneOf: [{ required: ['payer_account_id'] }, { required: ['payment_method'] }],
      dependentRequired: { provider: ['payment_method'], return_url: ['payment_method'] },
    });
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * Who pays: exactly one of a ledger account and a provider's payment method. Judged on presence
 * alone, and even when other fields are bad, so one answer names every problem. `null` counts as
 * absent here: the field's own check already names it ("null is not a value").
 */
function payerProblems(body: Record<string, unknown>): Array<{ path: string[]; message: string }> {
  const given = (field: string) => body[field] !== undefined && body[field] !== null;
  const payer = given('payer_account_id');
  const paymentMethod = given('payment_method');
  const problems: Array<{ path: string[]; message: string }> = [];
  if (payer && paymentMethod) {
    const both = 'a charge names one payer: payer_account_id (a ledger account) or payment_method (through a provider), not both';
    problems.push({ path: ['payer_account_id'], message: both }, { path: ['payment_method'], message: both });
  } else if (body.payer_account_id === undefined && body.payment_method === undefined) {
    const neither = 'is required: a charge names payer_account_id (a ledger account) or payment_method (through a provider)';
    problems.push({ path: ['payer_account_id'], message: neither }, { path: ['payment_method'], message: neither });
  }
  if (given('provider') && body.payment_method === undefined) {
    problems.push({ path: ['provider'], message: 'is allowed only with payment_method: it names the provider of that payment method' });
  }
  if (given('return_url') && body.payment_method === undefined) {
    problems.push({ path: ['return_url'], message: 'is allowed only with payment_method: the payer comes back there from the provider' });
  }
  return problems;
}

export type ChargeRequestInput = z.input<ReturnType<typeof chargeRequestSchema>>;

/** One message per offending field, named as the caller spelled it. */
export function fieldErrors(error: z.ZodError): FieldError[] {
  return error.issues.flatMap((issue): FieldError[] => {
    if (issue.code === 'unrecognized_keys') return issue.keys.map((key) => ({ field: key, message: 'is not a known field' }));
    const field = issue.path.map(String).join('.') || 'body';
    if (issue.code === 'invalid_key') {
      // A metadata key that breaks the rules: say why, from the key's own issues.
      return [{ field, message: `key ${issue.issues.map((inner) => inner.message).join('; ')}` }];
    }
    const missing = issue.code === 'invalid_type' && issue.input === undefined;
    return [{ field, message: missing ? 'is required' : issue.message }];
  });
}

export function assertObjectBody(body: unknown, field = 'body'): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ValidationError([{ field, message: 'must be a JSON object' }]);
  }
  return body as Record<string, unknown>;
}


/** Parses an untrusted schema-shaped value; throws ValidationError naming every bad field. */
export function parseWith<S extends z.ZodType>(schema: S, value: unknown): z.output<S> {
  const parsed = schema.safeParse(value, { reportInput: true });
  if (!parsed.success) throw new ValidationError(fieldErrors(parsed.error));
  return parsed.data;
}

/** Parses an untrusted charge body; throws ValidationError naming every bad field. */
export function parseChargeRequest(body: unknown, amountMinorMax: number): ChargeRequest {
  const b = parseWith(chargeRequestSchema(amountMinorMax), assertObjectBody(body));
  const common = {
    orderId: b.order_id,
    payeeAccountId: b.payee_account_id,
    amountMinor: b.amount,
    currency: b.currency,
    captureMode: b.capture,
    description: b.description ?? null,
    metadata: b.metadata ?? null,
  };
  if (b.payment_method === undefined) return { ...common, payerAccountId: b.payer_account_id! };
  const provider = b.provider ?? defaultProviderName;
  // The ledger pays a provider charge from the clearing account: everything that reads the payer
  // (mandates, listings, search attributes) keeps working; the fingerprint names the instrument.
  return {
    ...common,
    payerAccountId: clearingAccountId(provider, b.currency),
    paymentMethod: { provider, id: b.payment_method },
    ...(b.return_url !== undefined ? { returnUrl: b.return_url } : {}),
  };
}

export function assertIdempotencyKey(key: unknown, field = 'idempotency_key'): string {
  if (typeof key !== 'string' || key.length === 0) {
    throw new ValidationError([{ field, message: 'is required: 1-255 visible ASCII characters, reused on every retry' }]);
  }
  const problem = idempotencyKeyProblem(key);
  if (problem) throw new ValidationError([{ field, message: problem }]);
  return key;
}

export function assertAccountId(id: unknown, field = 'account_id'): string {
  if (typeof id !== 'string') throw new ValidationError([{ field, message: 'is required' }]);
  const problem = accountIdProblem(id);
  if (problem) throw new ValidationError([{ field, message: problem }]);
  return id;
}

/** Free text that is not part of a charge (an API key's label): the same rules. */
export function assertText(text: unknown, field: string, rule: TextRule): string {
  if (typeof text !== 'string') throw new ValidationError([{ field, message: 'must be a string' }]);
  const problem = textProblem(text, rule);
  if (problem) throw new ValidationError([{ field, message: problem }]);
  return text;
}

/**
 * Optional amount for a partial capture or refund, as the TypeScript API takes it: null means
 * "all of it". Wire bodies go through parseAmountField, where null is an error.
 */
export function parseOptionalAmount(value: unknown, field: string, amountMinorMax: number): number | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw new ValidationError([{ field, message: 'must be an integer number of minor units (cents)' }]);
  }
  if (value < limits.amountMinorMin || value > amountMinorMax) {
    throw new ValidationError([{ field, message: `must be between ${limits.amountMinorMin} and ${amountMinorMax}` }]);
  }
  return value;
}

/**
 * A body of `{}` or `{amount}` (capture, refund). Absent means "all of it"; `"amount": null`
 * is an error, not a synonym, so a caller's bug (an unset variable) never moves everything.
 */
function parseAmountBody(body: unknown, amountMinorMax: number, allOf: string): number | null {
  if (body === undefined) return null;
  const object = assertObjectBody(body);
  const unknown = Object.keys(object).filter((field) => field !== 'amount');
  if (unknown.length > 0) throw new ValidationError(unknown.map((field) => ({ field, message: 'is not a known field' })));
  if (!('amount' in object) || object.amount === undefined) return null;
  if (object.amount === null) {
    throw new ValidationError([
      { field: 'amount', message: `must be an integer number of minor units (cents), or left out for ${allOf}: null is not a value` },
    ]);
  }
  return parseOptionalAmount(object.amount, 'amount', amountMinorMax);
}

/** The capture body on the wire: none or `{}` (capture all that is reserved) or `{amount}`. */
export function parseCaptureBody(body: unknown, amountMinorMax: number): number | null {
  return parseAmountBody(body, amountMinorMax, 'all that is reserved');
}

/** The refund body on the wire: `{}` (refund all that is left) or `{amount}`. */
export function parseRefundBody(body: unknown, amountMinorMax: number): number | null {
  return parseAmountBody(body, amountMinorMax, 'all that is left to refund');
}

/** A body for an operation that takes no parameters (cancel): nothing, or `{}`. */
export function assertEmptyBody(body: unknown): void {
  if (body === undefined) return;
  const object = assertObjectBody(body);
  const fields = Object.keys(object);
  if (fields.length > 0) {
    throw new ValidationError(fields.map((field) => ({ field, message: 'is not a known field: this operation takes no parameters' })));
  }
}

/** Where a page of a list starts or ends, validated: at most one cursor (an object's id, or for charges its key). */
export interface ValidPageQuery {
  /** 1 to 100; 20 when omitted. */
  limit: number;
  startingAfter?: string;
  endingBefore?: string;
}

/** What every list takes besides its own filters. */
export const pageQueryNames = ['limit', 'starting_after', 'ending_before'] as const;

/** The page parameters of a list, typed (the TypeScript API's); each problem is added to `errors`. */
function validatePageQuery(
  query: { limit?: unknown; startingAfter?: unknown; endingBefore?: unknown },
  errors: FieldError[],
): ValidPageQuery {
  const limit = query.limit ?? limits.listLimitDefault;
  if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < limits.listLimitMin || limit > limits.listLimitMax) {
    errors.push({ field: 'limit', message: `must be an integer between ${limits.listLimitMin} and ${limits.listLimitMax}` });
  }
  const cursors: Array<readonly ['starting_after' | 'ending_before', unknown]> = [
    ['starting_after', query.startingAfter],
    ['ending_before', query.endingBefore],
  ];
  for (const [field, value] of cursors) {
    if (value === undefined) continue;
    // Ids (ch_…, re_…, account ids, @provider/… clearing accounts) and idempotency keys are all
    // 1-255 visible ASCII characters: the key's rule judges every cursor's shape.
    const problem = typeof value === 'string' ? idempotencyKeyProblem(value) : 'must be a string';
    if (problem) errors.push({ field, message: problem });
  }
  if (query.startingAfter !== undefined && query.endingBefore !== undefined) {
    const why = 'a page either starts after one object or ends before one: send one cursor';
    errors.push({ field: 'starting_after', message: `cannot be sent with ending_before: ${why}` });
    errors.push({ field: 'ending_before', message: `cannot be sent with starting_after: ${why}` });
  }
  return {
    limit: limit as number,
    ...(typeof query.startingAfter === 'string' ? { startingAfter: query.startingAfter } : {}),
    ...(typeof query.endingBefore === 'string' ? { endingBefore: query.endingBefore } : {}),
  };
}

/**
 * A list's query string as the HTTP parser hands it over (strings, or arrays when a name repeats):
 * unknown names are refused as unknown body fields are (a misspelt filter must not silently list
 * everything), a name given twice too; `limit` must be written as the integer it is.
 */
function rawQueryProblems(raw: Record<string, unknown>, names: readonly string[], errors: FieldError[]): void {
  for (const [name, value] of Object.entries(raw)) {
    if (!names.includes(name)) errors.push({ field: name, message: 'is not a known query parameter' });
    else if (typeof value !== 'string') errors.push({ field: name, message: 'must be given once' });
  }
  const limitText = raw.limit;
  if (typeof limitText === 'string' && !/^\d{1,3}$/.test(limitText)) {
    errors.push({ field: 'limit', message: `must be an integer between ${limits.listLimitMin} and ${limits.listLimitMax}` });
  }
}

function pageQueryOf(raw: Record<string, unknown>): { limit?: unknown; startingAfter?: unknown; endingBefore?: unknown } {
  return {
    limit: typeof raw.limit === 'string' ? Number(raw.limit) : undefined,
    startingAfter: raw.starting_after,
    endingBefore: raw.ending_before,
  };
}

/** The query string of a list without filters of its own (a charge's refunds, accounts). */
export function parsePageQuery(raw: Record<string, unknown>): ValidPageQuery {
  const errors: FieldError[] = [];
  rawQueryProblems(raw, pageQueryNames, errors);
  if (errors.length > 0) throw new ValidationError(errors);
  const valid = validatePageQuery(pageQueryOf(raw), errors);
  if (errors.length > 0) throw new ValidationError(errors);
  return valid;
}

/** The query parameters `GET /v1/refunds` takes: the charge whose refunds it lists, and a page. */
export const refundListQueryNames = ['charge', ...pageQueryNames] as const;

/** The query string of `GET /v1/refunds`: `charge` (a charge id or key) narrows it to one charge's refunds. */
export function parseRefundListQuery(raw: Record<string, unknown>): ValidPageQuery & { charge?: string } {
  const errors: FieldError[] = [];
  rawQueryProblems(raw, refundListQueryNames, errors);
  if (errors.length > 0) throw new ValidationError(errors);
  const charge = raw.charge;
  if (charge !== undefined) {
    const problem = typeof charge === 'string' ? idempotencyKeyProblem(charge) : 'must be a string';
    if (problem) errors.push({ field: 'charge', message: problem });
  }
  const page = validatePageQuery(pageQueryOf(raw), errors);
  if (errors.length > 0) throw new ValidationError(errors);
  return charge === undefined ? page : { ...page, charge: charge as string };
}

/** The query parameters `GET /v1/events` takes (docs/events.md, Catching up). */
export const eventListQueryNames = ['type', 'object_id', ...pageQueryNames] as const;

export interface ValidEventListQuery extends ValidPageQuery {
  /** An event type, or `<object>.*` for every type of one object. */
  type?: string;
  objectId?: string;
}

/** The query string of `GET /v1/events`: `type` one of eventTypes or `<object>.*`, `object_id` an object's id. */
export function parseEventListQuery(raw: Record<string, unknown>): ValidEventListQuery {
  const types: readonly string[] = eventTypes;
  const objectTypes: readonly string[] = eventObjectTypes;
  const errors: FieldError[] = [];
  rawQueryProblems(raw, eventListQueryNames, errors);
  if (errors.length > 0) throw new ValidationError(errors);
  const page = validatePageQuery(pageQueryOf(raw), errors);
  const { type, object_id: objectId } = raw;
  if (type !== undefined && !types.includes(type as string) && !objectTypes.some((object) => type === `${object}.*`)) {
    errors.push({ field: 'type', message: `must be one of ${types.join(', ')}, or ${objectTypes.map((object) => `${object}.*`).join(', ')}` });
  }
  if (objectId !== undefined) {
    const problem = idempotencyKeyProblem(objectId as string);
    if (problem) errors.push({ field: 'object_id', message: problem });
  }
  if (errors.length > 0) throw new ValidationError(errors);
  return {
    ...page,
    ...(type !== undefined ? { type: type as string } : {}),
    ...(objectId !== undefined ? { objectId: objectId as string } : {}),
  };
}

/** Filters for finding charges, validated. */
export interface ValidChargeListQuery extends ValidPageQuery {
  orderId?: string;
  payerAccountId?: string;
  status?: ChargeStatus;
}

/** Checks typed list filters (the TypeScript API's); throws ValidationError naming every bad one. */
export function validateChargeListQuery(query: {
  orderId?: unknown;
  payerAccountId?: unknown;
  status?: unknown;
  limit?: unknown;
  startingAfter?: unknown;
  endingBefore?: unknown;
}): ValidChargeListQuery {
  const errors: FieldError[] = [];
  const page = validatePageQuery(query, errors);
  if (query.status !== undefined && !(chargeStatuses as readonly unknown[]).includes(query.status)) {
    errors.push({ field: 'status', message: `must be one of ${chargeStatuses.join(', ')}` });
  }
  const check = (field: string, value: unknown, problemOf: (text: string) => string | null): void => {
    if (value === undefined) return;
    const problem = typeof value === 'string' ? problemOf(value) : 'must be a string';
    if (problem) errors.push({ field, message: problem });
  };
  check('order_id', query.orderId, (text) => textProblem(text, { minLength: 1, maxLength: limits.orderIdMaxLength }));
  check('payer_account_id', query.payerAccountId, accountIdProblem);
  if (errors.length > 0) throw new ValidationError(errors);
  return {
    ...page,
    ...(query.orderId !== undefined ? { orderId: query.orderId as string } : {}),
    ...(query.payerAccountId !== undefined ? { payerAccountId: query.payerAccountId as string } : {}),
    ...(query.status !== undefined ? { status: query.status as ChargeStatus } : {}),
  };
}

/** The query parameters `GET /v1/charges` takes. */
export const chargeListQueryNames = ['order_id', 'payer_account_id', 'status', ...pageQueryNames] as const;

/** The query string of `GET /v1/charges`, as the HTTP parser hands it over. */
export function parseChargeListQuery(raw: Record<string, unknown>): ValidChargeListQuery {
  const errors: FieldError[] = [];
  rawQueryProblems(raw, chargeListQueryNames, errors);
  if (errors.length > 0) throw new ValidationError(errors);
  return validateChargeListQuery({
    ...pageQueryOf(raw),
    orderId: raw.order_id,
    payerAccountId: raw.payer_account_id,
    status: raw.status,
  });
}
