import { z } from 'zod';
import { mandateRules } from '../domain/mandate.js';
import { limitScopes } from '../domain/rate-limits.js';
import { dependencies } from '../domain/errors.js';
import { errorKinds, retryAdvices, type ErrorKindName } from '../domain/error-kinds.js';
import { portableObject } from './portable-schema.js';
import { wireAccountSchema, wireChargeSchema, wireRefundSchema } from '../service/wire.js';
import { wireEventSchema } from '../service/events.js';
import { wireDeliveryAttemptSchema, wireWebhookEndpointSchema, wireWebhookEndpointWithSecretSchema } from '../service/webhook-endpoints.js';

/**
 * The tools' output schemas. An MCP client checks every result's structured content against the
 * tool's schema, tool errors included (src/mcp/tool-results.ts), so each schema is one object that
 * accepts both: the success members, and `error` alone when the result is an error. Every member is
 * therefore optional in the schema; the descriptions say which come together. The SDK turns them
 * into draft-07 JSON Schemas, made portable first (portable-schema.ts): a member that is null over
 * HTTP is left out of a tool result, and the schemas say so by making it optional.
 */

const errorKindNames = Object.keys(errorKinds) as [ErrorKindName, ...ErrorKindName[]];

/** A tool error's `error` member: what went wrong, what to do, and the kind's own details. */
export const toolErrorSchema = z
  .object({
    type: z.enum(errorKindNames).describe('stable code of the error kind, e.g. idempotency_conflict'),
    detail: z.string().describe('what went wrong, for a person'),
    retry: z.enum(retryAdvices).describe('retry_same_key: call again unchanged; fix_request: change what detail names; do_not_retry'),
    next_step: z.string().describe('what to do next'),
    errors: z.array(z.object({ field: z.string(), message: z.string() })).optional().describe('validation_error: each offending argument'),
    reason: z.string().optional().describe('charge_state_conflict: which state refused the operation; charge_declined: the decline code'),
    rule: z.enum(mandateRules).optional().describe("mandate_exceeded: the key's mandate rule the charge broke"),
    operation: z.string().optional().describe("forbidden: the operation the key's role does not allow"),
    dependency: z.enum(dependencies).optional().describe('service_unavailable: what is unreachable'),
    scope: z.enum(limitScopes).optional().describe('rate_limited, open_holds_exceeded: whose limit was reached'),
    'violated-policies': z.array(z.enum(limitScopes)).optional().describe('rate_limited: the policies that refused the call'),
  })
  .describe('present only when the result is an error (isError), and then alone');

const replayed = z.boolean().describe('true when this key was already used for this request: nothing new was done');
const completed = z.boolean().describe('false while the outcome is not decided (not known within the wait, or the payer must act): call again with the same keys');

const wireOutputSchemas = {
  /** create_charge */
  chargeCreated: z.object({
    charge: wireChargeSchema.optional().describe('on success: the charge'),
    replayed: replayed.optional(),
    completed: completed.optional(),
    error: toolErrorSchema.optional(),
  }),
  /** get_charge, cancel_charge, capture_charge */
  charge: z.object({
    charge: wireChargeSchema.optional().describe('on success: the charge as it stands now'),
    error: toolErrorSchema.optional(),
  }),
  /** refund_charge */
  refundCreated: z.object({
    refund: wireRefundSchema.optional().describe('on success: the refund'),
    replayed: replayed.optional(),
    completed: completed.optional(),
    error: toolErrorSchema.optional(),
  }),
  /** get_account_balance */
  account: z.object({
    account: wireAccountSchema.optional().describe('on success: the account and its balances'),
    error: toolErrorSchema.optional(),
  }),
  /** list_events: each event as GET /v1/events has it; data.object (a charge, refund or deposit) as any object, the union not being portable */
  events: z.object({
    events: z
      .array(
        wireEventSchema.extend({
          data: z.object({ object: z.record(z.string(), z.unknown()).describe('the charge, refund or deposit as it was at that change') }),
        }),
      )
      .optional()
      .describe('on success: the events, newest first'),
    has_more: z.boolean().optional().describe('more events lie beyond these: call again with starting_after the last id'),
    error: toolErrorSchema.optional(),
  }),
  /** list_webhook_endpoints */
  webhookEndpoints: z.object({
    webhook_endpoints: z.array(wireWebhookEndpointSchema).optional().describe('on success: the endpoints, newest first (never their secrets)'),
    has_more: z.boolean().optional().describe('more endpoints lie beyond these: call again with starting_after the last id'),
    error: toolErrorSchema.optional(),
  }),
  /** get_webhook_endpoint */
  webhookEndpointWithAttempts: z.object({
    webhook_endpoint: wireWebhookEndpointSchema.optional().describe('on success: the endpoint (never its secret)'),
    attempts: z.array(wireDeliveryAttemptSchema).optional().describe('on success: its latest delivery attempts, newest first'),
    error: toolErrorSchema.optional(),
  }),
  /** create_webhook_endpoint */
  webhookEndpointCreated: z.object({
    webhook_endpoint: wireWebhookEndpointWithSecretSchema.optional().describe('on success: the endpoint and its signing secret'),
    replayed: replayed.optional(),
    error: toolErrorSchema.optional(),
  }),
  /** update_webhook_endpoint, disable_webhook_endpoint */
  webhookEndpoint: z.object({
    webhook_endpoint: wireWebhookEndpointSchema.optional().describe('on success: the endpoint as it stands now'),
    error: toolErrorSchema.optional(),
  }),
  /** delete_webhook_endpoint */
  webhookEndpointDeleted: z.object({
    deleted: z
      .object({ id: z.string(), object: z.literal('webhook_endpoint'), deleted: z.boolean().describe('true') })
      .optional()
      .describe('on success: the deleted endpoint'),
    error: toolErrorSchema.optional(),
  }),
  /** rotate_webhook_endpoint_secret */
  webhookEndpointSecret: z.object({
    secret: z
      .object({
        object: z.literal('webhook_endpoint_secret'),
        endpoint_id: z.string(),
        secret: z.string().describe('the new signing secret (whsec_…), shown this once'),
        previous_secrets_expire_at: z.string().describe('RFC 3339 timestamp (UTC): until then the previous secrets sign beside it'),
      })
      .optional()
      .describe('on success: the new secret'),
    error: toolErrorSchema.optional(),
  }),
} as const;

/** What the tools declare: {@link wireOutputSchemas}, in plain JSON Schema every client reads. */
export const outputSchemas = {
  chargeCreated: portableObject(wireOutputSchemas.chargeCreated),
  charge: portableObject(wireOutputSchemas.charge),
  refundCreated: portableObject(wireOutputSchemas.refundCreated),
  account: portableObject(wireOutputSchemas.account),
  events: portableObject(wireOutputSchemas.events),
  webhookEndpoints: portableObject(wireOutputSchemas.webhookEndpoints),
  webhookEndpointWithAttempts: portableObject(wireOutputSchemas.webhookEndpointWithAttempts),
  webhookEndpointCreated: portableObject(wireOutputSchemas.webhookEndpointCreated),
  webhookEndpoint: portableObject(wireOutputSchemas.webhookEndpoint),
  webhookEndpointDeleted: portableObject(wireOutputSchemas.webhookEndpointDeleted),
  webhookEndpointSecret: portableObject(wireOutputSchemas.webhookEndpointSecret),
} as const;
