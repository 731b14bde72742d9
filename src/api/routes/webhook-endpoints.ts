import type { FastifyInstance } from 'fastify';
import { listToWire } from '../../service/wire.js';
import type { ApiDeps } from '../deps.js';
import { webhookEndpointLimits } from '../../domain/webhook-endpoints.js';
import {
  adminOnlyProblems,
  bodyProblems,
  commonProblems,
  idempotencyKeyParameter,
  jsonResponse,
  listResponse,
  pageQueryProperties,
  problemResponses,
  ref,
  replayHeaders,
} from '../openapi.js';
import { assertWellFormedQuery, bodyOf, requireIdempotencyKey } from '../request-headers.js';
import { refuseOtherMethods } from './method-not-allowed.js';

/**
 * Webhook endpoints (docs/webhook-endpoints.md): where the tenant's events are delivered, OUTBOUND,
 * signed per Standard Webhooks. Admin keys only. Not the INBOUND provider callbacks of
 * routes/webhooks.ts (POST /v1/webhooks/{provider}).
 */
const endpointParams = {
  type: 'object',
  properties: { id: { type: 'string', minLength: 27, maxLength: 27, pattern: '^we_[A-Za-z0-9]{24}$', description: 'the endpoint\'s id (we_…)' } },
  required: ['id'],
} as const;

const notFound = problemResponses({ 404: 'no webhook endpoint with this id for this tenant' });

export function registerWebhookEndpointRoutes(app: FastifyInstance, deps: ApiDeps): void {
  const endpoints = deps.webhookEndpoints;
  refuseOtherMethods(app, '/v1/webhook-endpoints', ['GET', 'POST']);
  refuseOtherMethods(app, '/v1/webhook-endpoints/:id', ['GET', 'POST', 'DELETE']);
  refuseOtherMethods(app, '/v1/webhook-endpoints/:id/rotate-secret', ['POST']);
  refuseOtherMethods(app, '/v1/webhook-endpoints/:id/deliveries', ['GET', 'POST']);
  const config = { operation: 'webhook_endpoints.manage' } as const;

  app.post<{ Body: unknown }>(
    '/v1/webhook-endpoints',
    {
      config,
      schema: {
        summary: 'Register a webhook endpoint: events are POSTed to it, signed (the secret is answered this once)',
        description:
          'Admin keys only. The URL must be https, carry no credentials, and its host must resolve to public addresses only ' +
          '(the outbound door: docs/webhook-endpoints.md). The answer carries `secret` (`whsec_` + base64): the only time it is ' +
          `shown. At most ${webhookEndpointLimits.endpointsPerTenantMax} endpoints per tenant (endpointsPerTenantMax). ` +
          'Exactly once per Idempotency-Key (required): a retry with the same key and body answers 200 with ' +
          '`Idempotent-Replayed: true` and the first answer again, the same id and the same `secret`, even if the endpoint was ' +
          'changed or its secret rotated since; the same key with another body is a 422 `idempotency_conflict` naming the key, ' +
          'and a key whose endpoint was deleted a 404. Nothing is registered by either.',
        tags: ['webhook endpoints'],
        headers: idempotencyKeyParameter(
          true,
          'names this registration: reuse it verbatim on every retry, and a lost answer (with its secret) is answered again; ' +
            'a new key registers a new endpoint. 1-255 visible ASCII characters',
        ),
        body: ref('CreateWebhookEndpointRequest'),
        response: {
          200: jsonResponse('an earlier request with this key and body registered it: its answer again, `secret` included', 'WebhookEndpointWithSecret', replayHeaders),
          201: jsonResponse('registered; `secret` is shown this once (and to retries with the same Idempotency-Key)', 'WebhookEndpointWithSecret'),
          ...commonProblems,
          ...adminOnlyProblems,
          ...bodyProblems,
          ...problemResponses({
            404: 'the endpoint registered under this Idempotency-Key was deleted',
            422: 'the Idempotency-Key was first used to register an endpoint with another request',
          }),
        },
      },
    },
    async (request, reply) => {
      const key = requireIdempotencyKey(request);
      const { endpoint, replayed } = await endpoints.create(request.tenant, key, request.body);
      if (replayed) reply.header('idempotent-replayed', 'true');
      reply.header('location', `/v1/webhook-endpoints/${endpoint.id}`);
      return reply.code(replayed ? 200 : 201).send(endpoint);
    },
  );

  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/webhook-endpoints',
    {
      config,
      schema: {
        summary: "The tenant's webhook endpoints, newest first",
        description: 'Pages of at most `limit` endpoints; `starting_after` / `ending_before` name an endpoint of this list by its id.',
        tags: ['webhook endpoints'],
        querystring: { type: 'object', properties: pageQueryProperties('a webhook endpoint id, we_…'), additionalProperties: false },
        response: { 200: listResponse('a page of webhook endpoints', 'WebhookEndpoint'), ...commonProblems, ...adminOnlyProblems },
      },
    },
    async (request) => {
      assertWellFormedQuery(request);
      const page = await endpoints.list(request.tenant, request.query);
      return listToWire(page.data, page.hasMore, '/v1/webhook-endpoints');
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/webhook-endpoints/:id',
    {
      config,
      schema: {
        summary: 'A webhook endpoint (never its secret)',
        tags: ['webhook endpoints'],
        params: endpointParams,
        response: { 200: jsonResponse('the endpoint', 'WebhookEndpoint'), ...commonProblems, ...adminOnlyProblems, ...notFound },
      },
    },
    async (request) => endpoints.get(request.tenant, request.params.id),
  );

  app.post<{ Params: { id: string }; Body: unknown }>(
    '/v1/webhook-endpoints/:id',
    {
      config,
      schema: {
        summary: 'Change a webhook endpoint: url, enabled_events, description, or disable / enable it',
        description:
          'Only the fields given change. `disabled: true` stops deliveries: they wait, and resume when `disabled: false`, which also ' +
          'enables an endpoint the service disabled (410, failing for days). A new url passes the outbound door\'s checks as at registration.',
        tags: ['webhook endpoints'],
        params: endpointParams,
        body: ref('UpdateWebhookEndpointRequest'),
        response: { 200: jsonResponse('the endpoint as it is now', 'WebhookEndpoint'), ...commonProblems, ...adminOnlyProblems, ...bodyProblems, ...notFound },
      },
    },
    async (request) => endpoints.update(request.tenant, request.params.id, request.body),
  );

  app.delete<{ Params: { id: string } }>(
    '/v1/webhook-endpoints/:id',
    {
      config,
      schema: {
        summary: 'Delete a webhook endpoint, its secrets, its deliveries not yet made and their attempts',
        tags: ['webhook endpoints'],
        params: endpointParams,
        response: { 200: jsonResponse('deleted', 'DeletedWebhookEndpoint'), ...commonProblems, ...adminOnlyProblems, ...notFound },
      },
    },
    async (request) => endpoints.delete(request.tenant, request.params.id),
  );

  app.post<{ Params: { id: string }; Body: unknown }>(
    '/v1/webhook-endpoints/:id/rotate-secret',
    {
      config,
      schema: {
        summary: 'A new signing secret; the current ones keep signing for `overlap_seconds` beside it',
        description:
          'During the overlap every delivery carries one `v1,` signature per live secret in `webhook-signature`, so a receiver ' +
          'verifies with either. The new secret is answered this once. ' +
          `At most ${webhookEndpointLimits.liveSecretsMax} secrets sign at once (liveSecretsMax): beyond it the oldest stops at once.`,
        tags: ['webhook endpoints'],
        params: endpointParams,
        body: ref('RotateWebhookSecretRequest'),
        response: { 200: jsonResponse('the new secret, shown this once', 'WebhookEndpointSecret'), ...commonProblems, ...adminOnlyProblems, ...bodyProblems, ...notFound },
      },
    },
    async (request) => endpoints.rotateSecret(request.tenant, request.params.id, bodyOf(request)),
  );

  app.get<{ Params: { id: string }; Querystring: Record<string, unknown> }>(
    '/v1/webhook-endpoints/:id/deliveries',
    {
      config,
      schema: {
        summary: "The endpoint's latest delivery attempts, newest first",
        tags: ['webhook endpoints'],
        params: endpointParams,
        querystring: {
          type: 'object',
          properties: { limit: { type: 'integer', minimum: 1, maximum: webhookEndpointLimits.attemptsListMax, default: 20 } },
          additionalProperties: false,
        },
        response: { 200: listResponse('the latest attempts', 'WebhookDeliveryAttempt'), ...commonProblems, ...adminOnlyProblems, ...notFound },
      },
    },
    async (request) => {
      assertWellFormedQuery(request);
      const attempts = await endpoints.attempts(request.tenant, request.params.id, request.query);
      return listToWire(attempts, false, `/v1/webhook-endpoints/${request.params.id}/deliveries`);
    },
  );

  app.post<{ Params: { id: string }; Body: unknown }>(
    '/v1/webhook-endpoints/:id/deliveries',
    {
      config,
      schema: {
        summary: 'Send an event to the endpoint again (a new delivery, due now)',
        description:
          'The delivery carries the same `webhook-id` (the event id) as the first, so a receiver that already has it drops it. ' +
          'A disabled endpoint\'s deliveries wait until it is enabled again.',
        tags: ['webhook endpoints'],
        params: endpointParams,
        body: ref('RedeliverRequest'),
        response: {
          202: jsonResponse('queued', 'WebhookDelivery'),
          ...commonProblems,
          ...adminOnlyProblems,
          ...bodyProblems,
          ...problemResponses({ 404: 'no webhook endpoint with this id for this tenant' }),
        },
      },
    },
    async (request, reply) => reply.code(202).send(await endpoints.redeliver(request.tenant, request.params.id, request.body)),
  );
}
