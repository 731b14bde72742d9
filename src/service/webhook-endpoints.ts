import { z } from 'zod';
import { eventIdPattern, eventTypePattern, webhookEndpointIdFor, webhookEndpointIdPattern, webhookEndpointLimits } from '../domain/webhook-endpoints.js';
import { requestBodyFingerprint } from '../domain/request-fingerprint.js';
import type { LedgerPool } from '../ledger/pool.js';
import {
  createEndpointOnce,
  deleteEndpoint,
  EndpointLimitError,
  getEndpoint,
  listAttempts,
  listEndpoints,
  readEndpointCreation,
  requestRedelivery,
  rotateSecret,
  updateEndpoint,
  type DeliveryAttempt,
  type EndpointCreation,
  type WebhookEndpoint,
} from '../ledger/webhook-endpoints.js';
import { checkedAddress, DoorRefusal, urlFormProblem, type DoorSettings } from '../outbound/door.js';
import { IdempotencyConflictError, NotFoundError, ValidationError } from '../domain/errors.js';
import { pageCursorOf, resolveCursor } from './listing.js';
import { assertIdempotencyKey, assertObjectBody, parsePageQuery, parseWith, textSchema } from './validation.js';
import { assertTenant } from '../domain/identifiers.js';

/**
 * Webhook endpoints (docs/webhook-endpoints.md): where a tenant's events are delivered, OUTBOUND,
 * signed. Not the INBOUND provider callbacks of webhooks.ts (POST /v1/webhooks/{provider}).
 */

const notNull = (expected: string) => (issue: { input?: unknown }) =>
  issue.input === null ? `must be ${expected}, or left out: null is not a value` : `must be ${expected}`;

const urlSchema = z
  .string({ error: notNull('a string') })
  .max(webhookEndpointLimits.urlMaxLength, `is longer than ${webhookEndpointLimits.urlMaxLength} characters`)
  .describe(
    'where events are POSTed: an https URL without credentials, whose host resolves to public addresses only ' +
      `(docs/webhook-endpoints.md, The outbound door); at most ${webhookEndpointLimits.urlMaxLength} characters`,
  );

const enabledEventsSchema = z
  .array(
    z.string({ error: notNull('a string') }).regex(eventTypePattern, 'must be an event type (`charge.succeeded`) or `*` for every type'),
    { error: notNull('an array of event types') },
  )
  .min(1, 'must name at least one event type (or `*`)')
  .max(webhookEndpointLimits.enabledEventsMax, `names more than ${webhookEndpointLimits.enabledEventsMax} event types`)
  .refine((types) => new Set(types).size === types.length, 'names an event type twice')
  .describe(`the event types to deliver (\`charge.succeeded\`, …), or \`["*"]\` for all; at most ${webhookEndpointLimits.enabledEventsMax}`);

const descriptionSchema = textSchema({ maxLength: webhookEndpointLimits.descriptionMaxLength, multiLine: false }).describe(
  `for you: what this endpoint is (at most ${webhookEndpointLimits.descriptionMaxLength} characters)`,
);

export const createWebhookEndpointBodySchema = z
  .object({ url: urlSchema, enabled_events: enabledEventsSchema, description: descriptionSchema.optional() })
  .strict();

export const updateWebhookEndpointBodySchema = z
  .object({
    url: urlSchema.optional(),
    enabled_events: enabledEventsSchema.optional(),
    description: descriptionSchema.optional(),
    disabled: z
      .boolean({ error: notNull('true or false') })
      .optional()
      .describe('true stops deliveries (they wait, and resume when it is false again); false also enables an endpoint the service disabled'),
  })
  .strict();

export const rotateWebhookSecretBodySchema = z
  .object({
    overlap_seconds: z
      .number({ error: notNull('a whole number of seconds') })
      .int('must be a whole number of seconds')
      .min(0, 'must be at least 0')
      .max(webhookEndpointLimits.rotationOverlapMaxSeconds, `must be at most ${webhookEndpointLimits.rotationOverlapMaxSeconds} (7 days)`)
      .optional()
      .describe(
        `how long the current secrets keep signing beside the new one, in seconds (0: the new one alone, at once); ` +
          `${webhookEndpointLimits.rotationOverlapDefaultSeconds} (24 hours) unless given`,
      ),
  })
  .strict();

export const redeliverBodySchema = z
  .object({ event: z.string({ error: notNull('an event id') }).regex(eventIdPattern, 'must be an event id (evt_…)').describe('the event to send again') })
  .strict();

const timestamp = z.string().describe('RFC 3339 timestamp (UTC)');

export const wireWebhookEndpointSchema = z.object({
  id: z.string().describe('we_…'),
  object: z.literal('webhook_endpoint'),
  url: z.string(),
  enabled_events: z.array(z.string()),
  description: z.string().nullable(),
  status: z.enum(['enabled', 'disabled']),
  disabled_reason: z
    .enum(['requested', 'gone', 'failing'])
    .nullable()
    .describe('why it is disabled: you asked (requested), it answered 410 (gone), or every attempt failed for days (failing)'),
  disabled_at: timestamp.nullable(),
  created_at: timestamp,
  updated_at: timestamp,
});
export type WireWebhookEndpoint = z.infer<typeof wireWebhookEndpointSchema>;

export const wireWebhookEndpointWithSecretSchema = wireWebhookEndpointSchema.extend({
  secret: z
    .string()
    .describe('the signing secret (`whsec_` + base64), shown by this create and by its retries under the same Idempotency-Key only: keep it to verify deliveries'),
});
export type WireWebhookEndpointWithSecret = z.infer<typeof wireWebhookEndpointWithSecretSchema>;

export const wireDeliveryAttemptSchema = z.object({
  object: z.literal('webhook_delivery_attempt'),
  id: z.number().int(),
  delivery_id: z.number().int(),
  event_id: z.string(),
  attempt: z.number().int().describe('1 for the first attempt of this delivery'),
  started_at: timestamp,
  duration_ms: z.number().int(),
  status_code: z.number().int().nullable().describe('the endpoint\'s answer; null when none came (refused address, timeout, connection failed)'),
  error: z.string().nullable(),
  delivered: z.boolean().describe('a 2xx'),
  delivery_state: z.enum(['pending', 'delivered', 'failed']).describe("the delivery's state now"),
  requested: z.boolean().describe('a redelivery asked for through the API'),
});

export const wireRedeliverySchema = z.object({
  object: z.literal('webhook_delivery'),
  id: z.number().int(),
  endpoint_id: z.string(),
  event_id: z.string(),
  state: z.literal('pending'),
});

export function webhookEndpointToWire(endpoint: WebhookEndpoint): WireWebhookEndpoint {
  return {
    id: endpoint.id,
    object: 'webhook_endpoint',
    url: endpoint.url,
    enabled_events: endpoint.enabledEvents,
    description: endpoint.description,
    status: endpoint.disabledAt === null ? 'enabled' : 'disabled',
    disabled_reason: endpoint.disabledReason,
    disabled_at: endpoint.disabledAt?.toISOString() ?? null,
    created_at: endpoint.createdAt.toISOString(),
    updated_at: endpoint.updatedAt.toISOString(),
  };
}

function attemptToWire(attempt: DeliveryAttempt): z.infer<typeof wireDeliveryAttemptSchema> {
  return {
    object: 'webhook_delivery_attempt',
    id: attempt.id,
    delivery_id: attempt.deliveryId,
    event_id: attempt.eventId,
    attempt: attempt.attempt,
    started_at: attempt.startedAt.toISOString(),
    duration_ms: attempt.durationMs,
    status_code: attempt.statusCode,
    error: attempt.error,
    delivered: attempt.delivered,
    delivery_state: attempt.deliveryState,
    requested: attempt.requested,
  };
}

function assertEndpointId(id: string): string {
  if (!webhookEndpointIdPattern.test(id)) throw new ValidationError([{ field: 'id', message: 'must be a webhook endpoint id (we_ and 24 letters or digits)' }]);
  return id;
}

export class WebhookEndpointsService {
  constructor(private readonly options: { ledger: LedgerPool; door: DoorSettings }) {}

  /** The URL's form, and every address its host resolves to now: a 400 naming `url` otherwise. */
  private async assertUrl(url: string): Promise<void> {
    const form = urlFormProblem(url, this.options.door);
    if (form !== null) throw new ValidationError([{ field: 'url', message: form }]);
    try {
      await checkedAddress(url, this.options.door);
    } catch (error) {
      if (error instanceof DoorRefusal) throw new ValidationError([{ field: 'url', message: `is refused: ${error.message}` }]);
      throw error;
    }
  }

  /**
   * Registers the endpoint once per (tenant, Idempotency-Key): the same key with the same body answers
   * what the first create answered (the same id and secret, as it was then; `replayed`), whatever
   * happened to the endpoint since, and without checking its URL again; the same key with another body
   * is an IdempotencyConflictError, nothing created. The key names the endpoint's id (as an account's
   * key names the account). A key whose endpoint was deleted is a NotFoundError: it never makes another.
   */
  async create(tenant: string, idempotencyKey: string, body: unknown): Promise<{ endpoint: WireWebhookEndpointWithSecret; replayed: boolean }> {
    assertTenant(tenant);
    assertIdempotencyKey(idempotencyKey, 'Idempotency-Key');
    const request = parseWith(createWebhookEndpointBodySchema, assertObjectBody(body));
    // The whole validated body, as a charge's v2 fingerprint takes its body; absent description left out.
    const fingerprint = requestBodyFingerprint({
      url: request.url,
      enabled_events: request.enabled_events,
      ...(request.description !== undefined ? { description: request.description } : {}),
    });
    // A retry is answered before the URL's addresses are resolved again: what was registered stays
    // registered even if the host now resolves elsewhere (or not at all, for a moment).
    const earlier = await readEndpointCreation(this.options.ledger, tenant, idempotencyKey);
    if (earlier !== null) return replayed(idempotencyKey, fingerprint, earlier);
    await this.assertUrl(request.url);
    try {
      const result = await createEndpointOnce(
        this.options.ledger,
        { tenant, url: request.url, enabledEvents: request.enabled_events, description: request.description ?? null },
        webhookEndpointLimits.endpointsPerTenantMax,
        { idempotencyKey, fingerprint, endpointId: webhookEndpointIdFor(tenant, idempotencyKey), answer: webhookEndpointToWire },
      );
      // Another request with this key committed between the read above and the lock: judged the same way.
      if ('recorded' in result) return replayed(idempotencyKey, fingerprint, result.recorded);
      return { endpoint: { ...webhookEndpointToWire(result.created.endpoint), secret: result.created.secret }, replayed: false };
    } catch (error) {
      if (error instanceof EndpointLimitError) {
        throw new ValidationError([{ field: 'url', message: `cannot be added: ${error.message} (endpointsPerTenantMax ${error.max})` }]);
      }
      throw error;
    }
  }

  async list(tenant: string, rawQuery: Record<string, unknown>): Promise<{ data: WireWebhookEndpoint[]; hasMore: boolean }> {
    assertTenant(tenant);
    const page = parsePageQuery(rawQuery);
    const cursor = pageCursorOf(page);
    const resolved = cursor
      ? {
          direction: cursor.direction,
          id: await resolveCursor(cursor, 'webhook endpoint', async (value) => ((await getEndpoint(this.options.ledger, tenant, value)) ? value : null)),
        }
      : null;
    const { endpoints, hasMore } = await listEndpoints(this.options.ledger, tenant, { limit: page.limit, cursor: resolved });
    return { data: endpoints.map(webhookEndpointToWire), hasMore };
  }

  async get(tenant: string, id: string): Promise<WireWebhookEndpoint> {
    assertTenant(tenant);
    const endpoint = await getEndpoint(this.options.ledger, tenant, assertEndpointId(id));
    if (endpoint === null) throw notFound(id);
    return webhookEndpointToWire(endpoint);
  }

  async update(tenant: string, id: string, body: unknown): Promise<WireWebhookEndpoint> {
    assertTenant(tenant);
    assertEndpointId(id);
    const request = parseWith(updateWebhookEndpointBodySchema, assertObjectBody(body));
    if (request.url !== undefined) await this.assertUrl(request.url);
    const endpoint = await updateEndpoint(this.options.ledger, tenant, id, {
      ...(request.url !== undefined ? { url: request.url } : {}),
      ...(request.enabled_events !== undefined ? { enabledEvents: request.enabled_events } : {}),
      ...(request.description !== undefined ? { description: request.description } : {}),
      ...(request.disabled !== undefined ? { disabled: request.disabled } : {}),
    });
    if (endpoint === null) throw notFound(id);
    return webhookEndpointToWire(endpoint);
  }

  async delete(tenant: string, id: string): Promise<{ id: string; object: 'webhook_endpoint'; deleted: true }> {
    assertTenant(tenant);
    if (!(await deleteEndpoint(this.options.ledger, tenant, assertEndpointId(id)))) throw notFound(id);
    return { id, object: 'webhook_endpoint', deleted: true };
  }

  async rotateSecret(tenant: string, id: string, body: unknown): Promise<{ object: 'webhook_endpoint_secret'; endpoint_id: string; secret: string; previous_secrets_expire_at: string }> {
    assertTenant(tenant);
    assertEndpointId(id);
    const request = parseWith(rotateWebhookSecretBodySchema, body === undefined ? {} : assertObjectBody(body));
    const overlapSeconds = request.overlap_seconds ?? webhookEndpointLimits.rotationOverlapDefaultSeconds;
    const rotated = await rotateSecret(this.options.ledger, tenant, id, overlapSeconds * 1000, webhookEndpointLimits.liveSecretsMax);
    if (rotated === null) throw notFound(id);
    return { object: 'webhook_endpoint_secret', endpoint_id: id, secret: rotated.secret, previous_secrets_expire_at: rotated.previousExpireAt.toISOString() };
  }

  async attempts(tenant: string, id: string, rawQuery: Record<string, unknown>): Promise<z.infer<typeof wireDeliveryAttemptSchema>[]> {
    assertTenant(tenant);
    assertEndpointId(id);
    const limit = parseAttemptsLimit(rawQuery);
    const attempts = await listAttempts(this.options.ledger, tenant, id, limit);
    if (attempts === null) throw notFound(id);
    return attempts.map(attemptToWire);
  }

  async redeliver(tenant: string, id: string, body: unknown): Promise<z.infer<typeof wireRedeliverySchema>> {
    assertTenant(tenant);
    assertEndpointId(id);
    const request = parseWith(redeliverBodySchema, assertObjectBody(body));
    const result = await requestRedelivery(this.options.ledger, tenant, id, request.event);
    if (result === 'endpoint') throw notFound(id);
    if (result === 'event') throw new ValidationError([{ field: 'event', message: 'names no event of this tenant' }]);
    return { object: 'webhook_delivery', id: result.deliveryId, endpoint_id: id, event_id: request.event, state: 'pending' };
  }
}

/** `limit` of GET /v1/webhook-endpoints/{id}/deliveries: 1 to attemptsListMax, 20 by default. */
function parseAttemptsLimit(raw: Record<string, unknown>): number {
  const unknown = Object.keys(raw).filter((name) => name !== 'limit');
  if (unknown.length > 0) throw new ValidationError(unknown.map((field) => ({ field, message: 'is not a parameter of this list (limit is)' })));
  if (raw.limit === undefined) return 20;
  const text = raw.limit;
  const value = typeof text === 'string' && /^[0-9]{1,4}$/.test(text) ? Number(text) : NaN;
  if (!(value >= 1 && value <= webhookEndpointLimits.attemptsListMax)) {
    throw new ValidationError([{ field: 'limit', message: `must be a whole number from 1 to ${webhookEndpointLimits.attemptsListMax}` }]);
  }
  return value;
}

/**
 * A create whose key was used before: the same request gets the first answer again (Stripe replays
 * the original response); another request is the key's conflict, as for charges and refunds.
 */
function replayed(idempotencyKey: string, fingerprint: string, earlier: EndpointCreation): { endpoint: WireWebhookEndpointWithSecret; replayed: true } {
  if (earlier.fingerprint !== fingerprint) {
    throw new IdempotencyConflictError(
      `idempotency key ${idempotencyKey} was already used to register webhook endpoint ${earlier.endpointId} with a different request; ` +
        'use a new key for a new endpoint, or resend the original request unchanged',
    );
  }
  if (earlier.secret === null) {
    throw new NotFoundError(
      `webhook endpoint ${earlier.endpointId}, registered under idempotency key ${idempotencyKey}, was deleted; a new key registers a new endpoint`,
    );
  }
  // Parsed by the wire schema, so the fields come back in the order the first answer had them
  // (PostgreSQL's jsonb keeps its own key order).
  return { endpoint: { ...wireWebhookEndpointSchema.parse(earlier.answer), secret: earlier.secret }, replayed: true };
}

function notFound(id: string): NotFoundError {
  return new NotFoundError(`no webhook endpoint ${id} for this tenant`);
}
