import type { FastifyInstance } from 'fastify';
import { listToWire, refundToWire } from '../../service/wire.js';
import { serviceDeadlineEpochMs, type ApiDeps } from '../deps.js';
import { assertIdempotencyKey } from '../../service/validation.js';
import {
  bodyProblems,
  commonProblems,
  idempotencyKeyParameter,
  jsonResponse,
  listResponse,
  pageQueryProperties,
  pathParameterSchemas,
  problemResponses,
  ref,
  replayHeaders,
} from '../openapi.js';
import { assertWellFormedQuery, bodyOf, preferredWaitMs, requireIdempotencyKey } from '../request-headers.js';
import { chargeKeyOf, chargeKeyParams, chargeLocation } from './charges.js';
import { chargeActorOf } from '../../auth/principal.js';
import { refuseOtherMethods } from './method-not-allowed.js';

const refundParams = {
  type: 'object',
  properties: {
    ...chargeKeyParams.properties,
    refundKey: { ...pathParameterSchemas.idempotencyKey, description: 'the refund\'s own idempotency key (percent-encoded)' },
  },
  required: ['key', 'refundKey'],
} as const;

export function refundLocation(chargeKey: string, refundKey: string): string {
  return `/v1/charges/${encodeURIComponent(chargeKey)}/refunds/${encodeURIComponent(refundKey)}`;
}

export function registerRefundRoutes(app: FastifyInstance, deps: ApiDeps): void {
  const { context } = deps;
  refuseOtherMethods(app, '/v1/charges/:key/refunds', ['GET', 'POST']);
  refuseOtherMethods(app, '/v1/charges/:key/refunds/:refundKey', ['GET']);
  refuseOtherMethods(app, '/v1/refunds', ['GET']);

  app.post<{ Params: { key: string }; Body: unknown }>(
    '/v1/charges/:key/refunds',
    {
      config: { operation: 'refunds.create' },
      schema: {
        summary: 'Refund a succeeded charge, all that is left of it or `amount` of it',
        description:
          'The refund has its own Idempotency-Key: a repeated request returns the first result. The refunds of a ' +
          'charge never add up to more than was captured; a refused refund (409) is a decision, refused again on replay.',
        tags: ['refunds'],
        params: chargeKeyParams,
        headers: idempotencyKeyParameter(true, 'the refund\'s own key, reused verbatim on every retry of this refund'),
        body: ref('RefundRequest'),
        response: {
          200: jsonResponse('replay of an earlier request with the same refund key', 'Refund', replayHeaders),
          201: jsonResponse('refunded', 'Refund', { Location: { schema: { type: 'string' } } }),
          202: jsonResponse('still processing at the end of the wait budget', 'Refund', {
            Location: { schema: { type: 'string' } },
            'Retry-After': { schema: { type: 'integer' } },
          }),
          ...commonProblems,
          ...bodyProblems,
          ...problemResponses({
            403: 'the ledger refused the acting key for this charge\'s tenant (`refund_not_authorized`); nothing was refunded',
            404: 'no charge with this key for this tenant',
            409: 'not captured, more than is left to refund, or the payee cannot pay it back',
            422: 'the refund key was first used for a different refund',
          }),
        },
      },
    },
    async (request, reply) => {
      const chargeKey = chargeKeyOf(request.params);
      const refundKey = requireIdempotencyKey(request);
      const { waitMs, applied } = preferredWaitMs(request, deps.waitBudgetMs);
      const actor = chargeActorOf(request.principal);
      const audit = { audit: request.principal.role === 'admin' };
      const answer = await context.charges.refund(request.tenant, chargeKey, refundKey, bodyOf(request), {
        waitMs,
        deadlineEpochMs: serviceDeadlineEpochMs(deps, waitMs),
        ...(actor ? { actor } : {}),
      });
      if (applied) reply.header('preference-applied', applied);
      if (answer.replayed) reply.header('idempotent-replayed', 'true');
      reply.header('location', refundLocation(chargeKey, refundKey));
      if (!answer.completed) {
        reply.header('retry-after', String(deps.retryAfterSeconds));
        // As for a pending charge: the workflow's view lacks the creator, which is this request's key when it started it.
        const pending =
          answer.refund.createdByKeyId === undefined && !answer.replayed
            ? { ...answer.refund, createdByKeyId: request.principal.keyId }
            : answer.refund;
        return reply.code(202).send(refundToWire(pending, audit));
      }
      return reply.code(answer.replayed ? 200 : 201).send(refundToWire(answer.refund, audit));
    },
  );

  app.get<{ Params: { key: string }; Querystring: Record<string, unknown> }>(
    '/v1/charges/:key/refunds',
    {
      config: { operation: 'refunds.read' },
      schema: {
        summary: 'The refunds of a charge, refused ones included, oldest first',
        description:
          'Pages of at most `limit` refunds (20 unless asked). The next page: `starting_after` = the last refund\'s `id` ' +
          '(`re_…`) or its refund key; the previous one: `ending_before` = the first refund\'s. A cursor that names no ' +
          'refund of this charge is refused (400 naming the parameter).',
        tags: ['refunds'],
        params: chargeKeyParams,
        querystring: {
          type: 'object',
          properties: pageQueryProperties('a refund id, re_…, or its refund key'),
          additionalProperties: false,
        },
        response: {
          200: listResponse('a page of refunds', 'Refund'),
          ...commonProblems,
          ...problemResponses({ 404: 'no charge with this key for this tenant' }),
        },
      },
    },
    async (request) => {
      assertWellFormedQuery(request);
      const chargeKey = chargeKeyOf(request.params);
      const page = await context.charges.listRefundsFromQuery(request.tenant, chargeKey, request.query);
      const audit = { audit: request.principal.role === 'admin' };
      return listToWire(page.refunds.map((refund) => refundToWire(refund, audit)), page.hasMore, `${chargeLocation(chargeKey)}/refunds`);
    },
  );

  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/refunds',
    {
      config: { operation: 'refunds.read' },
      schema: {
        summary: 'The tenant\'s refunds, newest first; with `charge`, that charge\'s refunds, oldest first',
        description:
          'As Stripe\'s refund list: without `charge`, every refund of the tenant (refused ones included), newest first, ' +
          'paged by a refund\'s `id` (`re_…`). With `charge` (the charge\'s `id`, `ch_…`, or its idempotency key): the same ' +
          'list as `GET /v1/charges/{key}/refunds`, oldest first, paged by a refund\'s id or refund key. A charge or ' +
          'cursor that is not this tenant\'s is refused (400 naming the parameter).',
        tags: ['refunds'],
        querystring: {
          type: 'object',
          properties: {
            charge: { ...pathParameterSchemas.idempotencyKey, description: "the charge's id (ch_…) or idempotency key" },
            ...pageQueryProperties('a refund id, re_… (with `charge`, also its refund key)'),
          },
          additionalProperties: false,
        },
        response: {
          200: listResponse('a page of refunds', 'Refund'),
          ...commonProblems,
        },
      },
    },
    async (request) => {
      assertWellFormedQuery(request);
      const page = await context.charges.listRefundsByQuery(request.tenant, request.query);
      const audit = { audit: request.principal.role === 'admin' };
      return listToWire(page.refunds.map((refund) => refundToWire(refund, audit)), page.hasMore, '/v1/refunds');
    },
  );

  app.get<{ Params: { key: string; refundKey: string } }>(
    '/v1/charges/:key/refunds/:refundKey',
    {
      config: { operation: 'refunds.read' },
      schema: {
        summary: 'One refund',
        tags: ['refunds'],
        params: refundParams,
        response: {
          200: jsonResponse('the refund', 'Refund'),
          ...commonProblems,
          ...problemResponses({ 404: 'no such refund for this tenant' }),
        },
      },
    },
    async (request) =>
      refundToWire(
        await context.charges.getRefund(
          request.tenant,
          chargeKeyOf(request.params),
          assertIdempotencyKey(request.params.refundKey, 'refundKey'),
          { deadlineEpochMs: serviceDeadlineEpochMs(deps) },
        ),
        { audit: request.principal.role === 'admin' },
      ),
  );
}
