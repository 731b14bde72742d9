import { z } from 'zod';
import type { ChargeRequest } from '../domain/charge.js';
import { currencyPattern, idempotencyKeyPattern, limits } from '../domain/limits.js';
import { ValidationError, type FieldError } from './errors.js';

const accountId = z
  .string()
  .regex(limits.accountIdPattern, 'must be 1-64 characters of letters, digits, "_", ".", ":" or "-"');

const knownCurrencies = new Set(Intl.supportedValuesOf('currency'));

/** The create-charge body as it travels on the wire (snake_case, like most payment APIs). */
export function chargeRequestSchema(amountMinorMax: number) {
  return z
    .object({
      order_id: z.string().min(1).max(limits.orderIdMaxLength),
      payer_account_id: accountId,
      payee_account_id: accountId,
      amount: z
        .number({ error: 'must be an integer number of minor units (cents)' })
        .int('must be an integer number of minor units (cents), not a fraction')
        .min(limits.amountMinorMin, `must be at least ${limits.amountMinorMin}`)
        .max(amountMinorMax, `must be at most ${amountMinorMax}`),
      currency: z
        .string()
        .regex(currencyPattern, 'must be an upper-case ISO 4217 code such as "USD"')
        .refine((code) => knownCurrencies.has(code), 'is not an ISO 4217 currency'),
      capture: z.enum(['automatic', 'manual']).default('automatic'),
      description: z.string().max(limits.descriptionMaxLength).nullish(),
      metadata: z
        .record(z.string().min(1).max(limits.metadataKeyMaxLength), z.string().max(limits.metadataValueMaxLength))
        .refine((m) => Object.keys(m).length <= limits.metadataMaxKeys, `at most ${limits.metadataMaxKeys} keys`)
        .nullish(),
    })
    .strict()
    .refine((body) => body.payer_account_id !== body.payee_account_id, {
      path: ['payee_account_id'],
      message: 'must differ from payer_account_id',
    });
}

export type ChargeRequestInput = z.input<ReturnType<typeof chargeRequestSchema>>;

function fieldErrors(error: z.ZodError): FieldError[] {
  return error.issues.map((issue) => {
    if (issue.code === 'unrecognized_keys') {
      return { field: issue.keys.join(','), message: 'is not a known field' };
    }
    const field = issue.path.map(String).join('.') || 'body';
    const missing = issue.code === 'invalid_type' && issue.input === undefined;
    return { field, message: missing ? 'is required' : issue.message };
  });
}

/** Parses an untrusted charge body; throws ValidationError naming every bad field. */
export function parseChargeRequest(body: unknown, amountMinorMax: number): ChargeRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ValidationError([{ field: 'body', message: 'must be a JSON object' }]);
  }
  const parsed = chargeRequestSchema(amountMinorMax).safeParse(body, { reportInput: true });
  if (!parsed.success) throw new ValidationError(fieldErrors(parsed.error));
  const b = parsed.data;
  return {
    orderId: b.order_id,
    payerAccountId: b.payer_account_id,
    payeeAccountId: b.payee_account_id,
    amountMinor: b.amount,
    currency: b.currency,
    captureMode: b.capture,
    description: b.description ?? null,
    metadata: b.metadata ?? null,
  };
}

export function assertIdempotencyKey(key: unknown, field = 'idempotency_key'): string {
  if (typeof key !== 'string' || key.length === 0) {
    throw new ValidationError([{ field, message: 'is required: 1-255 visible ASCII characters, reused on every retry' }]);
  }
  if (key.length > limits.idempotencyKeyMaxLength) {
    throw new ValidationError([{ field, message: `is ${key.length} characters long; at most ${limits.idempotencyKeyMaxLength}` }]);
  }
  if (!idempotencyKeyPattern.test(key)) {
    throw new ValidationError([{ field, message: 'must be visible ASCII characters only (no spaces or control characters)' }]);
  }
  return key;
}

export function assertTenant(tenant: unknown): string {
  if (typeof tenant !== 'string' || !limits.tenantIdPattern.test(tenant)) {
    throw new ValidationError([{ field: 'tenant', message: 'must match [a-z0-9_-]{1,64}' }]);
  }
  return tenant;
}

/** Optional amount for a partial capture or refund: null means "all of it". */
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
