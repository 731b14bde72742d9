import type { FastifyInstance } from 'fastify';
import { ValidationError } from '../../client/errors.js';
import type { ChargeStatus } from '../../domain/charge.js';
import { chargeToWire, listToWire } from '../../client/wire.js';
import type { ApiDeps } from '../app.js';
import { withTemporalDeadline } from '../deadline.js';
import {
  commonProblems,
  idempotencyKeyParameter,
  jsonResponse,
  problemResponses,
  ref,
  replayHeaders,
} from '../openapi.js';
import { preferredWaitMs, requireIdempotencyKey } from '../request-headers.js';

export const chargeKeyParams = {
  type: 'object',
  properties: { key: { type: 'string', description: 'the idempotency key the charge was created with (percent-encoded)' } },
  required: ['key'],
} as const;

export function chargeLocation(key: string): string {
  return `/v1/charges/${encodeURIComponent(key)}`;
}

/** Body of a capture: only `amount`, and only optionally. */
function captureAmountOf(body: unknown): unknown {
  if (body === undefined || body === null) return null;
  if (typeof body !== 'object' || Array.isArray(body)) {
    throw new ValidationError([{ field: 'body', message: 'must be a JSON object' }]);
  }
  const unknown = Object.keys(body).filter((field) => field !== 'amount');
  if (unknown.length > 0) throw new ValidationError([{ field: unknown.join(','), message: 'is not a known field' }]);
  return (body as { amount?: unknown }).amount ?? null;
}

export function registerChargeRoutes(app: FastifyInstance, deps: ApiDeps): void {
  const { context, metrics } = deps;

  app.post<{ Body: unknown }>(
    '/v1/charges',
    {
      schema: {
        summary: 'Create a charge, or replay the one created with this Idempotency-Key',
        description:
          'Waits for the outcome up to the wait budget (`Prefer: wait=N` shortens it). 201: this request created ' +
          'the charge and it is decided. 200 with `Idempotent-Replayed: true`: an earlier request with the same key ' +
          'and body made it; the body is that request\'s outcome. 202: still processing, poll `Location` or retry.',
        tags: ['charges'],
        headers: idempotencyKeyParameter(true, 'reuse verbatim on every retry of this charge'),
        body: ref('CreateChargeRequest'),
        response: {
          200: jsonResponse('replay of an earlier request with the same key and body', 'Charge', replayHeaders),
          201: jsonResponse('created and decided (succeeded, declined, or reserved for manual capture)', 'Charge', {
            Location: { schema: { type: 'string' } },
          }),
          202: jsonResponse('still processing at the end of the wait budget', 'Charge', {
            Location: { schema: { type: 'string' } },
            'Retry-After': { schema: { type: 'integer' } },
          }),
          ...commonProblems,
          ...problemResponses({ 422: 'the key was first used for a different request; nothing ran' }),
        },
      },
    },
    async (request, reply) => {
      const key = requireIdempotencyKey(request);
      const { waitMs, applied } = preferredWaitMs(request, deps.waitBudgetMs);
      const answer = await withTemporalDeadline(context.temporal, waitMs + deps.temporalCallTimeoutMs, () =>
        context.charges.charge(request.tenant, key, request.body, { waitMs }),
      );
      metrics.chargeAnswered(answer);
      if (applied) reply.header('preference-applied', applied);
      if (answer.replayed) reply.header('idempotent-replayed', 'true');
      reply.header('location', chargeLocation(key));
      if (!answer.completed) {
        reply.header('retry-after', String(deps.retryAfterSeconds));
        return reply.code(202).send(chargeToWire(answer.charge));
      }
      return reply.code(answer.replayed ? 200 : 201).send(chargeToWire(answer.charge));
    },
  );

  app.get<{ Querystring: Record<string, string | undefined> }>(
    '/v1/charges',
    {
      schema: {
        summary: 'Find charges by order, payer or status, newest first',
        description: 'Pages of at most `limit` charges; pass the last idempotency_key as `starting_after` for the next page.',
        tags: ['charges'],
        querystring: {
          type: 'object',
          properties: {
            order_id: { type: 'string' },
            payer_account_id: { type: 'string' },
            status: { type: 'string', enum: ['pending', 'reserved', 'succeeded', 'declined', 'cancelled', 'partially_refunded', 'refunded'] },
            limit: { type: 'integer', minimum: 1, maximum: 100, default: 20 },
            starting_after: { type: 'string', description: 'idempotency key of the last charge of the previous page' },
          },
        },
        response: {
          200: {
            description: 'a page of charges',
            content: {
              'application/json': {
                schema: {
                  type: 'object',
                  properties: { object: { const: 'list' }, data: { type: 'array', items: ref('Charge') }, has_more: { type: 'boolean' } },
                },
              },
            },
          },
          ...commonProblems,
        },
      },
    },
    async (request) => {
      const q = request.query;
      const limit = q.limit === undefined ? undefined : Number(q.limit);
      if (limit !== undefined && !Number.isSafeInteger(limit)) {
        throw new ValidationError([{ field: 'limit', message: 'must be an integer between 1 and 100' }]);
      }
      const page = await context.charges.listCharges(request.tenant, {
        orderId: q.order_id,
        payerAccountId: q.payer_account_id,
        status: q.status as ChargeStatus | undefined,
        limit,
        startingAfter: q.starting_after,
      });
      return listToWire(page.charges.map(chargeToWire), page.hasMore);
    },
  );

  app.get<{ Params: { key: string } }>(
    '/v1/charges/:key',
    {
      schema: {
        summary: 'The charge as it stands now (refunds included)',
        tags: ['charges'],
        params: chargeKeyParams,
        response: {
          200: jsonResponse('the charge', 'Charge'),
          ...commonProblems,
          ...problemResponses({ 404: 'no charge with this key for this tenant' }),
        },
      },
    },
    async (request) =>
      chargeToWire(
        await withTemporalDeadline(context.temporal, deps.temporalCallTimeoutMs, () =>
          context.charges.getCharge(request.tenant, request.params.key),
        ),
      ),
  );

  app.post<{ Params: { key: string } }>(
    '/v1/charges/:key/cancel',
    {
      schema: {
        summary: 'Cancel a charge that has not succeeded; the hold is released',
        description: 'Repeating a cancel returns the cancelled charge. A succeeded charge cannot be cancelled: refund it.',
        tags: ['charges'],
        params: chargeKeyParams,
        response: {
          200: jsonResponse('the cancelled charge', 'Charge'),
          ...commonProblems,
          ...problemResponses({ 404: 'no charge with this key for this tenant', 409: 'the charge already succeeded or was declined' }),
        },
      },
    },
    async (request) =>
      chargeToWire(
        await withTemporalDeadline(context.temporal, deps.temporalCallTimeoutMs, () =>
          context.charges.cancelCharge(request.tenant, request.params.key),
        ),
      ),
  );

  app.post<{ Params: { key: string }; Body: unknown }>(
    '/v1/charges/:key/capture',
    {
      schema: {
        summary: 'Capture a charge created with capture "manual"',
        description: 'Captures all of the hold, or `amount` of it (the rest is released). Repeating a capture returns the captured charge.',
        tags: ['charges'],
        params: chargeKeyParams,
        body: ref('CaptureRequest'),
        response: {
          200: jsonResponse('the captured charge', 'Charge'),
          ...commonProblems,
          ...problemResponses({
            404: 'no charge with this key for this tenant',
            409: 'not a manual-capture charge, or cancelled, expired, declined, or captured with another amount',
          }),
        },
      },
    },
    async (request) => {
      const amount = captureAmountOf(request.body);
      return chargeToWire(
        await withTemporalDeadline(context.temporal, deps.temporalCallTimeoutMs, () =>
          context.charges.captureCharge(request.tenant, request.params.key, amount as number | null),
        ),
      );
    },
  );
}
