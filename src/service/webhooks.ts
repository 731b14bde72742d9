import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import {
  parseSignatureHeader,
  timestampRefusal,
  verifyWebhookSignature,
  webhookSignatureHeader,
  webhookToleranceSeconds,
} from '../domain/webhook-signature.js';
import { limits } from '../domain/limits.js';
import { assertProvider, providerPattern } from '../domain/identifiers.js';
import { decodeStrictJson, StrictJsonError } from '../support/strict-json.js';
import type { LedgerPool } from '../ledger/pool.js';
import {
  activeWebhookSecrets,
  creditFromWebhook,
  insertWebhookSecret,
  listWebhookSecrets,
  revokeWebhookSecret,
  rotateWebhookSecret,
  type RecordedWebhookEvent,
  type WebhookSecretRecord,
} from '../ledger/webhooks.js';
import { IdempotencyConflictError, NotFoundError, UnauthorizedError, ValidationError, type FieldError } from '../domain/errors.js';
import { asUnavailable } from './unavailable.js';
import { amountSchema, currencySchema, accountIdSchema, idempotencyKeySchema, parseWith } from './validation.js';
import type { WireDeposit } from './wire.js';

/**
 * Provider callbacks that credit money (docs/webhooks.md): the signature is checked before the
 * body is even parsed, the event is judged by a strict schema, and the credit is exactly-once per
 * (provider, event id) across all tenants.
 */

// ---------------------------------------------------------------------------------------------
// Providers and their secrets

export const webhookSecretPrefix = 'whsec_';
/** 256 random bits: nothing to guess. */
const secretBytes = 32;
const secretIdPattern = /^whk_[0-9a-f]{16}$/;

/** How long the old secrets keep verifying after a rotation unless told otherwise: a day to deploy the new one. */
export const defaultRotationOverlapSeconds = 24 * 60 * 60;
/** A longer overlap is a second secret kept alive by accident; revoke and add instead. */
export const maxRotationOverlapSeconds = 30 * 24 * 60 * 60;

export function assertWebhookSecretId(id: unknown, field = '<secret-id>'): string {
  if (typeof id !== 'string' || !secretIdPattern.test(id)) {
    throw new ValidationError([{ field, message: 'must be a webhook secret id: whk_ and 16 hex digits' }]);
  }
  return id;
}

export function assertOverlapSeconds(seconds: number, field = '--overlap-seconds'): number {
  if (!Number.isSafeInteger(seconds) || seconds < 0 || seconds > maxRotationOverlapSeconds) {
    throw new ValidationError([{ field, message: `must be a whole number of seconds from 0 to ${maxRotationOverlapSeconds} (30 days)` }]);
  }
  return seconds;
}

function newSecret(provider: string): { id: string; provider: string; secret: string } {
  return {
    id: `whk_${randomBytes(8).toString('hex')}`,
    provider,
    secret: webhookSecretPrefix + randomBytes(secretBytes).toString('base64url'),
  };
}

export type { WebhookSecretRecord };

/** Makes a secret for the provider and returns it in clear: the only time it is ever visible. */
export async function addWebhookSecret(pool: LedgerPool, provider: string): Promise<{ secret: string; record: WebhookSecretRecord }> {
  assertProvider(provider);
  const made = newSecret(provider);
  const record = await translate(() => insertWebhookSecret(pool, made));
  return { secret: made.secret, record };
}

/**
 * A new secret for the provider; the ones that verify now keep verifying for `overlapSeconds`,
 * so callbacks signed with either are accepted while the provider switches.
 */
export async function rotateWebhookSecrets(
  pool: LedgerPool,
  provider: string,
  overlapSeconds: number = defaultRotationOverlapSeconds,
): Promise<{ secret: string; record: WebhookSecretRecord; expiring: WebhookSecretRecord[] }> {
  assertProvider(provider);
  assertOverlapSeconds(overlapSeconds);
  const made = newSecret(provider);
  const rotated = await translate(() => rotateWebhookSecret(pool, made, overlapSeconds));
  if (rotated === null) {
    throw new NotFoundError(`provider ${provider} has no current secret to rotate: add one with \`webhook-secrets add ${provider}\``);
  }
  return { secret: made.secret, record: rotated.created, expiring: rotated.expiring };
}

export async function listProviderSecrets(pool: LedgerPool, provider: string | null): Promise<WebhookSecretRecord[]> {
  if (provider !== null) assertProvider(provider, '--provider');
  return translate(() => listWebhookSecrets(pool, provider));
}

export async function revokeProviderSecret(pool: LedgerPool, id: string): Promise<WebhookSecretRecord> {
  assertWebhookSecretId(id);
  const revoked = await translate(() => revokeWebhookSecret(pool, id));
  if (!revoked) throw new NotFoundError(`no webhook secret ${id}`);
  return revoked;
}

/** The providers' callback secrets, for the CLI: the functions above, on the pool this holds. */
export class WebhookSecretService {
  constructor(private readonly ledger: LedgerPool) {}

  add(provider: string): ReturnType<typeof addWebhookSecret> {
    return addWebhookSecret(this.ledger, provider);
  }

  rotate(provider: string, overlapSeconds?: number): ReturnType<typeof rotateWebhookSecrets> {
    return rotateWebhookSecrets(this.ledger, provider, overlapSeconds);
  }

  list(provider: string | null): Promise<WebhookSecretRecord[]> {
    return listProviderSecrets(this.ledger, provider);
  }

  revoke(id: string): Promise<WebhookSecretRecord> {
    return revokeProviderSecret(this.ledger, id);
  }
}

/** Whether a secret verifies callbacks at `nowMs`, and if not, why. */
export function secretState(record: WebhookSecretRecord, nowMs: number): 'active' | 'expiring' | 'expired' | 'revoked' {
  if (record.revokedAt !== null) return 'revoked';
  if (record.expiresAt === null) return 'active';
  return Date.parse(record.expiresAt) > nowMs ? 'expiring' : 'expired';
}

// ---------------------------------------------------------------------------------------------
// The event

/** The one event type that moves money. Any other type is acknowledged and ignored. */
export const depositSucceededType = 'deposit.succeeded';

const notNull = (expected: string) => (issue: { input?: unknown }) =>
  issue.input === null ? `must be ${expected}: null is not a value` : `must be ${expected}`;

const eventTypeSchema = z
  .string({ error: notNull('a string') })
  .regex(/^[a-z0-9_]{1,32}(\.[a-z0-9_]{1,32}){0,3}$/, 'must be dot-separated lower-case words, e.g. "deposit.succeeded"');

const tenantSchema = z
  .string({ error: notNull('a string') })
  .regex(limits.tenantIdPattern, 'must match [a-z0-9_-]{1,64}');

/** Every event: its id, its type, and the type's data (judged by the type's own schema). */
const envelopeSchema = z
  .object({
    id: idempotencyKeySchema.describe("the provider's event id: redeliveries carry the same one"),
    type: eventTypeSchema,
    data: z.record(z.string(), z.unknown(), { error: notNull('a JSON object') }),
  })
  .strict();

export function depositSucceededSchema(amountMinorMax: number) {
  return z
    .object({
      id: idempotencyKeySchema.describe("the provider's event id, unique per provider across all tenants: redeliveries carry the same one"),
      type: z.literal(depositSucceededType),
      data: z
        .object({
          tenant: tenantSchema.describe('the tenant whose account is credited'),
          account_id: accountIdSchema,
          amount_minor: amountSchema(amountMinorMax).describe('the amount credited, in minor units (cents)'),
          currency: currencySchema.describe("must be the account's currency"),
        })
        .strict(),
    })
    .strict();
}

export type DepositSucceededEvent = z.output<ReturnType<typeof depositSucceededSchema>>;

/**
 * The body as JSON, read by the strict decoder as every request body is (src/support/strict-json.ts):
 * UTF-8 without a byte order mark, integer literals only, each member name once and none of the
 * prototype names. One JSON object, or a 400 naming `body` or the member at fault.
 */
function parseJsonObject(rawBody: Buffer): unknown {
  let value: unknown;
  try {
    value = decodeStrictJson(rawBody);
  } catch (error) {
    if (error instanceof StrictJsonError) throw new ValidationError([{ field: error.field, message: error.problem }]);
    throw error;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ValidationError([{ field: 'body', message: 'must be a JSON object (the event)' }]);
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// The answer

export interface WireWebhookReceipt {
  object: 'webhook_event';
  id: string;
  provider: string;
  type: string;
  /** credited: this event's deposit (now or at its first delivery); ignored: a type that moves no money. */
  status: 'credited' | 'ignored';
  tenant?: string;
  deposit?: WireDeposit;
}

export const wireWebhookReceiptSchema = z.object({
  object: z.literal('webhook_event'),
  id: z.string().describe("the provider's event id"),
  provider: z.string(),
  type: z.string(),
  status: z
    .enum(['credited', 'ignored'])
    .describe('credited: the event\'s deposit, made by its first delivery; ignored: a type that moves no money, not recorded'),
  tenant: z.string().optional().describe('present when credited'),
  deposit: z
    .object({
      id: z.string(),
      object: z.literal('deposit'),
      account_id: z.string(),
      amount: z.number().int(),
      currency: z.string(),
      created_at: z.string(),
    })
    .optional()
    .describe('present when credited: the same deposit on every delivery of the event'),
});

function receiptFor(event: RecordedWebhookEvent): WireWebhookReceipt {
  return {
    object: 'webhook_event',
    id: event.eventId,
    provider: event.provider,
    type: event.eventType,
    status: 'credited',
    tenant: event.tenant,
    deposit: {
      id: `dep_${event.transferId}`,
      object: 'deposit',
      account_id: event.accountId,
      amount: event.amountMinor,
      currency: event.currency,
      created_at: event.depositCreatedAt,
    },
  };
}

/** The fields a redelivery must repeat; any difference means another event under a reused id. */
function differingFields(recorded: RecordedWebhookEvent, event: DepositSucceededEvent): string[] {
  const pairs: Array<[string, unknown, unknown]> = [
    ['type', recorded.eventType, event.type],
    ['data.tenant', recorded.tenant, event.data.tenant],
    ['data.account_id', recorded.accountId, event.data.account_id],
    ['data.amount_minor', recorded.amountMinor, event.data.amount_minor],
    ['data.currency', recorded.currency, event.data.currency],
  ];
  return pairs.filter(([, first, now]) => first !== now).map(([field]) => field);
}

export interface WebhookDelivery {
  provider: string;
  /** The Chargeguard-Signature header as received (undefined: absent). */
  signatureHeader: string | undefined;
  /** The body's bytes exactly as received: the signature covers them, not a re-serialisation. */
  rawBody: Buffer;
  nowMs: number;
}

/**
 * Receives one delivery. Every refusal is decided before anything is written: the signature
 * first (no database read for a malformed or stale header), then the body, then the ledger,
 * whose one transaction writes the deposit and the event record together or not at all.
 */
export class WebhookService {
  constructor(
    private readonly options: { ledger: LedgerPool; amountMinorMax: number; toleranceSeconds?: number },
  ) {}

  async receive(delivery: WebhookDelivery): Promise<{ receipt: WireWebhookReceipt; replayed: boolean }> {
    const provider = assertProvider(delivery.provider);
    const parsed = parseSignatureHeader(delivery.signatureHeader);
    if ('reason' in parsed) {
      if (parsed.reason === 'missing') throw new UnauthorizedError(parsed.message);
      throw new ValidationError([{ field: webhookSignatureHeader, message: parsed.message }]);
    }
    const tolerance = this.options.toleranceSeconds ?? webhookToleranceSeconds;
    // A stale or future header is refused by the clock alone, before the secrets are read.
    const tooFar = timestampRefusal(parsed.timestampSeconds, delivery.nowMs, tolerance);
    if (tooFar) throw new UnauthorizedError(`${webhookSignatureHeader}: ${tooFar.message}`);
    const secrets = await translate(() => activeWebhookSecrets(this.options.ledger, provider));
    const verified = verifyWebhookSignature(parsed, delivery.rawBody, secrets, delivery.nowMs, tolerance);
    if ('reason' in verified) throw new UnauthorizedError(`${webhookSignatureHeader}: ${verified.message}`);

    const body = parseJsonObject(delivery.rawBody);
    const envelope = parseWith(envelopeSchema, body);
    if (envelope.type !== depositSucceededType) {
      // Acknowledged so the provider stops redelivering it; nothing is recorded for it.
      return { receipt: { object: 'webhook_event', id: envelope.id, provider, type: envelope.type, status: 'ignored' }, replayed: false };
    }
    const event = parseWith(depositSucceededSchema(this.options.amountMinorMax), body);

    const outcome = await translate(() =>
      creditFromWebhook(this.options.ledger, {
        provider,
        eventId: event.id,
        eventType: event.type,
        tenant: event.data.tenant,
        accountId: event.data.account_id,
        amountMinor: event.data.amount_minor,
        currency: event.data.currency,
        secretId: verified.secret.id,
      }),
    );
    switch (outcome.outcome) {
      case 'credited':
        return { receipt: receiptFor(outcome.event), replayed: false };
      case 'recorded_before': {
        const differing = differingFields(outcome.event, event);
        if (differing.length > 0) {
          throw new IdempotencyConflictError(
            `event ${event.id} of provider ${provider} was first delivered with other ${differing.join(', ')} ` +
              `(received ${outcome.event.receivedAt}); it credited once then and credits nothing now: a new event needs a new id`,
          );
        }
        return { receipt: receiptFor(outcome.event), replayed: true };
      }
      case 'account_not_found':
        throw new NotFoundError(`no account ${event.data.account_id} for tenant ${event.data.tenant}`);
      case 'currency_mismatch': {
        const errors: FieldError[] = [
          { field: 'data.currency', message: `is ${event.data.currency} but account ${event.data.account_id} holds ${outcome.accountCurrency}` },
        ];
        throw new ValidationError(errors);
      }
    }
  }
}

async function translate<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    throw asUnavailable(error);
  }
}
