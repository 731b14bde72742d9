import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { webhookEndpointLimits } from '../domain/webhook-endpoints.js';
import { limits } from '../domain/limits.js';
import { ValidationError } from '../domain/errors.js';
import type { Operation } from '../domain/permissions.js';
import type { Principal } from '../auth/principal.js';
import type { WebhookEndpointsService, WireWebhookEndpoint } from '../service/webhook-endpoints.js';
import { outputSchemas } from './output-schemas.js';
import { okResult } from './tool-results.js';

/** One tool call as the principal, its role checked for the operation first (server.ts). */
export type ToolRunner = (operation: Operation, body: (tenant: string, principal: Principal) => Promise<CallToolResult>) => Promise<CallToolResult>;

/**
 * The webhook endpoint tools (docs/webhook-endpoints.md): what the CLI's `webhook-endpoints`
 * commands do, through the same service as POST /v1/webhook-endpoints, for admin keys only (the
 * operation webhook_endpoints.manage; an agent key's call is the `forbidden` tool error).
 *
 * Hints (pinned by test/mcp-tool-schemas.test.ts): list and get read only. create adds an endpoint
 * once per idempotency_key (idempotent, not destructive). update, disable and delete change or
 * remove what exists (destructive), the same call again changing nothing more (idempotent); rotate
 * makes a new secret each call and ends the current ones after the overlap (destructive, not
 * idempotent). openWorldHint: create and update resolve the URL's host (its addresses are checked)
 * and send the tenant's events to it from then on; the others stay inside chargeguard.
 */
export const webhookEndpointToolAnnotations = {
  list_webhook_endpoints: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  get_webhook_endpoint: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  create_webhook_endpoint: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: true },
  update_webhook_endpoint: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: true },
  disable_webhook_endpoint: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
  delete_webhook_endpoint: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
  rotate_webhook_endpoint_secret: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
} as const;

const endpointId = z.string().describe('the endpoint id (we_…)');
const url = z.string().describe('where events are POSTed: an https URL without credentials, whose host resolves to public addresses only');
const enabledEvents = z
  .array(z.string())
  .describe(`the event types to deliver (charge.succeeded, refund.failed, …), or ["*"] for all; at most ${webhookEndpointLimits.enabledEventsMax}`);
const description = z.string().describe(`for you: what this endpoint is (at most ${webhookEndpointLimits.descriptionMaxLength} characters)`);
const adminOnly = 'Admin keys only.';

function summaryOf(endpoint: WireWebhookEndpoint): string {
  return `Webhook endpoint ${endpoint.id} (${endpoint.url}) is ${endpoint.status}${endpoint.disabled_reason ? ` (${endpoint.disabled_reason})` : ''}.`;
}

export function registerWebhookEndpointTools(server: McpServer, endpoints: WebhookEndpointsService, run: ToolRunner): void {
  const manage = 'webhook_endpoints.manage' as const;

  server.registerTool(
    'list_webhook_endpoints',
    {
      title: "List the tenant's webhook endpoints",
      description: `Where this tenant's events are delivered, newest first (never their secrets). Page with starting_after = the last id of a page. ${adminOnly}`,
      inputSchema: z
        .object({
          limit: z.number().optional().describe(`at most this many endpoints (1-${limits.listLimitMax}, ${limits.listLimitDefault} when omitted)`),
          starting_after: z.string().optional().describe('an endpoint id from an earlier page: the endpoints after (older than) it'),
        })
        .strict(),
      outputSchema: outputSchemas.webhookEndpoints,
      annotations: webhookEndpointToolAnnotations.list_webhook_endpoints,
    },
    ({ limit, starting_after }) =>
      run(manage, async (tenant) => {
        // The HTTP list's own parser (strings, as a query string carries them): the same rules and refusals.
        const query = Object.fromEntries(
          Object.entries({ limit: limit === undefined ? undefined : String(limit), starting_after }).filter(([, value]) => value !== undefined),
        );
        const page = await endpoints.list(tenant, query);
        const summary = page.data.length === 0 ? 'No webhook endpoints.' : `${page.data.length} webhook endpoints: ${page.data.map((e) => `${e.id} ${e.status}`).join('; ')}.`;
        return okResult(`${summary}${page.hasMore ? ` More: call again with starting_after ${page.data.at(-1)!.id}.` : ''}`, {
          webhook_endpoints: page.data,
          has_more: page.hasMore,
        });
      }),
  );

  server.registerTool(
    'get_webhook_endpoint',
    {
      title: 'Get a webhook endpoint and its latest delivery attempts',
      description: `The endpoint (never its secret) and its latest delivery attempts, newest first. ${adminOnly}`,
      inputSchema: z
        .object({
          id: endpointId,
          attempts_limit: z.number().optional().describe(`at most this many attempts (1-${webhookEndpointLimits.attemptsListMax}, 20 when omitted)`),
        })
        .strict(),
      outputSchema: outputSchemas.webhookEndpointWithAttempts,
      annotations: webhookEndpointToolAnnotations.get_webhook_endpoint,
    },
    ({ id, attempts_limit }) =>
      run(manage, async (tenant) => {
        const endpoint = await endpoints.get(tenant, id);
        const attempts = await endpoints
          .attempts(tenant, id, attempts_limit === undefined ? {} : { limit: String(attempts_limit) })
          .catch((error: unknown) => {
            // The service names the HTTP query's `limit`; this tool's argument is attempts_limit.
            if (error instanceof ValidationError) throw new ValidationError(error.errors.map((e) => (e.field === 'limit' ? { ...e, field: 'attempts_limit' } : e)));
            throw error;
          });
        return okResult(`${summaryOf(endpoint)} ${attempts.length} recent delivery attempts.`, { webhook_endpoint: endpoint, attempts });
      }),
  );

  server.registerTool(
    'create_webhook_endpoint',
    {
      title: 'Register a webhook endpoint (exactly once per idempotency_key)',
      description:
        "Registers a URL to which this tenant's events are delivered, signed (Standard Webhooks). The answer carries the signing " +
        'secret (whsec_…): keep it to verify deliveries; it is shown again only to a retry with the same idempotency_key and ' +
        `arguments. REUSE THE SAME KEY when you retry; a new key registers another endpoint. ${adminOnly}`,
      inputSchema: z
        .object({
          idempotency_key: z.string().describe('Idempotency key of this registration: 1-255 visible ASCII characters, the same one on retry'),
          url,
          enabled_events: enabledEvents,
          description: description.optional(),
        })
        .strict(),
      outputSchema: outputSchemas.webhookEndpointCreated,
      annotations: webhookEndpointToolAnnotations.create_webhook_endpoint,
    },
    ({ idempotency_key, ...body }) =>
      run(manage, async (tenant) => {
        const { endpoint, replayed } = await endpoints.create(tenant, idempotency_key, body);
        const summary = `${replayed ? 'Replayed: this key already registered this endpoint; nothing new was made. ' : ''}${summaryOf(endpoint)} Keep its secret to verify deliveries.`;
        return okResult(summary, { webhook_endpoint: endpoint, replayed });
      }),
  );

  server.registerTool(
    'update_webhook_endpoint',
    {
      title: 'Change a webhook endpoint',
      description:
        'Changes what is given: url, enabled_events, description; disabled true stops deliveries (they wait), false enables it again ' +
        `whatever disabled it. ${adminOnly}`,
      inputSchema: z
        .object({
          id: endpointId,
          url: url.optional(),
          enabled_events: enabledEvents.optional(),
          description: description.optional(),
          disabled: z.boolean().optional().describe('true stops deliveries; false enables the endpoint again'),
        })
        .strict(),
      outputSchema: outputSchemas.webhookEndpoint,
      annotations: webhookEndpointToolAnnotations.update_webhook_endpoint,
    },
    ({ id, ...body }) =>
      run(manage, async (tenant) => {
        const endpoint = await endpoints.update(tenant, id, body);
        return okResult(summaryOf(endpoint), { webhook_endpoint: endpoint });
      }),
  );

  server.registerTool(
    'disable_webhook_endpoint',
    {
      title: 'Disable a webhook endpoint',
      description: `Stops deliveries to the endpoint: they wait, and resume when update_webhook_endpoint sets disabled false. Repeating it is harmless. ${adminOnly}`,
      inputSchema: z.object({ id: endpointId }).strict(),
      outputSchema: outputSchemas.webhookEndpoint,
      annotations: webhookEndpointToolAnnotations.disable_webhook_endpoint,
    },
    ({ id }) =>
      run(manage, async (tenant) => {
        const endpoint = await endpoints.update(tenant, id, { disabled: true });
        return okResult(summaryOf(endpoint), { webhook_endpoint: endpoint });
      }),
  );

  server.registerTool(
    'delete_webhook_endpoint',
    {
      title: 'Delete a webhook endpoint',
      description: `Deletes the endpoint, its secrets, its deliveries not yet made and its attempts. The events themselves stay. ${adminOnly}`,
      inputSchema: z.object({ id: endpointId }).strict(),
      outputSchema: outputSchemas.webhookEndpointDeleted,
      annotations: webhookEndpointToolAnnotations.delete_webhook_endpoint,
    },
    ({ id }) =>
      run(manage, async (tenant) => {
        const deleted = await endpoints.delete(tenant, id);
        return okResult(`Webhook endpoint ${deleted.id} is deleted.`, { deleted });
      }),
  );

  server.registerTool(
    'rotate_webhook_endpoint_secret',
    {
      title: "Rotate a webhook endpoint's signing secret",
      description:
        'Makes a new signing secret (in the answer, shown this once); the current ones keep signing beside it for overlap_seconds, ' +
        `so receivers can switch without missing a delivery. Each call makes another secret. ${adminOnly}`,
      inputSchema: z
        .object({
          id: endpointId,
          overlap_seconds: z
            .number()
            .optional()
            .describe(
              `how long the current secrets keep signing beside the new one, in seconds (0 to ${webhookEndpointLimits.rotationOverlapMaxSeconds}; ` +
                `${webhookEndpointLimits.rotationOverlapDefaultSeconds} when omitted)`,
            ),
        })
        .strict(),
      outputSchema: outputSchemas.webhookEndpointSecret,
      annotations: webhookEndpointToolAnnotations.rotate_webhook_endpoint_secret,
    },
    ({ id, overlap_seconds }) =>
      run(manage, async (tenant) => {
        const secret = await endpoints.rotateSecret(tenant, id, overlap_seconds === undefined ? {} : { overlap_seconds });
        return okResult(
          `Webhook endpoint ${id} has a new signing secret; the previous ones sign until ${secret.previous_secrets_expire_at}. Keep it to verify deliveries.`,
          { secret },
        );
      }),
  );
}
