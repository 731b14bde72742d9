import type { FastifyInstance } from 'fastify';
import { chargeToWire, listToWire } from '../../service/wire.js';
import { chargeStatuses } from '../../domain/charge.js';
import { assertIdempotencyKey, defaultProviderName } from '../../service/validation.js';
import { limits } from '../../domain/limits.js';
import { serviceDeadlineEpochMs, type ApiDeps } from '../deps.js';
import {
  bodyProblems,
  commonProblems,
  idempotencyKeyOrTokenParameters,
  jsonResponse,
  listResponse,
  pageQueryProperties,
  pathParameterSchemas,
  problemResponses,
  ref,
  replayHeaders,
  singleLineText,
} from '../openapi.js';
import { assertWellFormedQuery, bodyOf, keyOrTokenOf, preferredWaitMs } from '../request-headers.js';
import { refuseOtherMethods } from './method-not-allowed.js';
import { addServerTiming } from '../../http/server-timing.js';
import { chargeActorOf, type Principal } from '../../auth/principal.js';

/** Audit fields (who created it) are shown to admin keys only. */
function auditFor(request: { principal: Principal }): { audit: boolean } {
  return { audit: request.principal.role === 'admin' };
}

export const chargeKeyParams = {
  type: 'object',
  properties: {
    key: {
      ...pathParameterSchemas.idempotencyKey,
      description: 'the idempotency key the charge was created with (percent-encoded)',
    },
  },
  required: ['key'],
} as const;

export function chargeLocation(key: string): string {
  return `/v1/charges/${encodeURIComponent(key)}`;
}

/** The charge key of the path, judged by the service's rules and named as the path names it. */
export function chargeKeyOf(params: { key: string }): string {
  return assertIdempotencyKey(params.key, 'key');
}

/** The charge routes, in the order the OpenAPI document lists them: create, reads, then cancel and capture. */
export function registerChargeRoutes(app: FastifyInstance, deps: ApiDeps): void {
  refuseOtherMethods(app, '/v1/charges', ['GET', 'POST']);
  refuseOtherMethods(app, '/v1/charges/:key', ['GET']);
  refuseOtherMethods(app, '/v1/charges/:key/cancel', ['POST']);
  refuseOtherMethods(app, '/v1/charges/:key/capture', ['POST']);
  registerCreateCharge(app, deps);
  registerChargeReads(app, deps);
  registerChargeActions(app, deps);
}

/** POST /v1/charges: start or attach, with an Idempotency-Key or a server-issued Idempotency-Token. */
function registerCreateCharge(app: FastifyInstance, deps: ApiDeps): void {
  const { context, metrics } = deps;
  const { tokens } = context;
  app.post<{ Body: unknown }>(
    '/v1/charges',
    {
      config: { operation: 'charges.create' },
      schema: {
        summary: 'Create a charge, or replay the one created with this Idempotency-Key',
        description:
          'Waits for the outcome up to the wait budget (`Prefer: wait=N` shortens it). 201: this request created ' +
          'the charge and it is decided. 200 with `Idempotent-Replayed: true`: an earlier request with the same key ' +
          'and body made it; the body is that request\'s outcome. 202: still processing, poll `Location` or retry.\n\n' +
          'The payer is a ledger account (`payer_account_id`) or an instrument at a payment provider (`payment_method`, ' +
          `with \`provider\`, default "${defaultProviderName}"): exactly one of the two. A provider charge whose payer must authenticate ` +
          '(3-D Secure) is not decided: it answers 202 with status `requires_action` and `next_action` (the provider\'s, ' +
          'untouched), and so does every repeat of the request until the payer has acted. Send `return_url` (https) so that ' +
          '`next_action` is a `redirect_to_url` whose `url` a person opens; then poll `Location` every `Retry-After` seconds. ' +
          'Left undone, the charge is cancelled when its hold expires.',
        tags: ['charges'],
        headers: idempotencyKeyOrTokenParameters('reuse verbatim on every retry of this charge'),
        body: ref('CreateChargeRequest'),
        response: {
          200: jsonResponse('replay of an earlier request with the same key and body', 'Charge', replayHeaders),
          201: jsonResponse('created and decided (succeeded, declined, cancelled, or reserved for manual capture)', 'Charge', {
            Location: { schema: { type: 'string' } },
          }),
          202: jsonResponse('still processing at the end of the wait budget (pending), or waiting for the payer (requires_action)', 'Charge', {
            Location: { schema: { type: 'string' } },
            'Retry-After': { schema: { type: 'integer' } },
          }),
          ...commonProblems,
          ...bodyProblems,
          ...problemResponses({
            403: 'outside the key\'s mandate (`mandate_exceeded`; `rule` names it: max_amount, daily_limit, payees, currency); nothing started',
            422: 'the key was first used for a different request (every body field counts); nothing ran',
          }),
        },
      },
    },
    async (request, reply) => {
      const source = keyOrTokenOf(request);
      const { waitMs, applied } = preferredWaitMs(request, deps.waitBudgetMs);
      const actor = chargeActorOf(request.principal);
      let key: string;
      let beforeStart: (() => Promise<void>) | undefined;
      if ('key' in source) key = source.key;
      else {
        // A token is marked used only once the charge is admitted, its body and mandate judged
        // first: a request refused for any of them (400, 403, 503 overloaded) leaves the token as
        // it was. From the redeem on the token is simply the charge's key.
        key = tokens.assertWellFormed(source.token);
        context.charges.buildIntent(request.tenant, key, request.body, actor);
        beforeStart = async () => {
          await tokens.redeem(request.tenant, key);
        };
      }
      const inLedger = request.chargeKeyInLedger;
      const answer = await context.charges.charge(request.tenant, key, request.body, {
        waitMs,
        deadlineEpochMs: serviceDeadlineEpochMs(deps, waitMs),
        ...(actor ? { actor } : {}),
        admission: {
          ...(inLedger?.key === key ? { ledgerKnowsKey: inLedger.known } : {}),
          onAdmitted: (startedAtMs) => addServerTiming(reply, 'admission', startedAtMs),
          ...(beforeStart ? { beforeStart } : {}),
        },
      });
      metrics.chargeAnswered(answer);
      if (applied) reply.header('preference-applied', applied);
      if (answer.replayed) reply.header('idempotent-replayed', 'true');
      reply.header('location', chargeLocation(key));
      if (!answer.completed) {
        reply.header('retry-after', String(deps.retryAfterSeconds));
        // A pending charge is the workflow's view, which does not carry its creator; when this
        // request started it, the creator is this request's key (a replay cannot tell, and omits it).
        const pending =
          answer.charge.createdByKeyId === undefined && !answer.replayed
            ? { ...answer.charge, createdByKeyId: request.principal.keyId }
            : answer.charge;
        return reply.code(202).send(chargeToWire(pending, auditFor(request)));
      }
      return reply.code(answer.replayed ? 200 : 201).send(chargeToWire(answer.charge, auditFor(request)));
    },
  );
}

/** GET /v1/charges (a page) and GET /v1/charges/{key}. */
function registerChargeReads(app: FastifyInstance, deps: ApiDeps): void {
  const { context } = deps;
  app.get<{ Querystring: Record<string, string | undefined> }>(
    '/v1/charges',
    {
      config: { operation: 'charges.read' },
      schema: {
        summary: 'Find charges by order, payer or status, newest first',
        description:
          'Pages of at most `limit` charges. The next page: `starting_after` = the last charge\'s `id` (`ch_…`) or ' +
          'its idempotency key; the previous one: `ending_before` = the first charge\'s. A cursor that names no charge ' +
          'of this tenant is refused (400 naming the parameter), never answered with an empty page.',
        tags: ['charges'],
        querystring: {
          type: 'object',
          properties: {
            order_id: singleLineText(limits.orderIdMaxLength),
            payer_account_id: pathParameterSchemas.accountId,
            status: { type: 'string', enum: [...chargeStatuses] },
            ...pageQueryProperties('a charge id, ch_…, or its idempotency key'),
          },
          additionalProperties: false,
        },
        response: {
          200: listResponse('a page of charges', 'Charge'),
          ...commonProblems,
        },
      },
    },
    async (request) => {
      assertWellFormedQuery(request);
      const page = await context.charges.listChargesFromQuery(request.tenant, request.query);
      return listToWire(page.charges.map((charge) => chargeToWire(charge, auditFor(request))), page.hasMore, '/v1/charges');
    },
  );

  app.get<{ Params: { key: string } }>(
    '/v1/charges/:key',
    {
      config: { operation: 'charges.read' },
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
        await context.charges.getCharge(request.tenant, chargeKeyOf(request.params), { deadlineEpochMs: serviceDeadlineEpochMs(deps) }),
        auditFor(request),
      ),
  );
}

/** POST /v1/charges/{key}/cancel and /capture. */
function registerChargeActions(app: FastifyInstance, deps: ApiDeps): void {
  const { context } = deps;
  app.post<{ Params: { key: string }; Body: unknown }>(
    '/v1/charges/:key/cancel',
    {
      config: { operation: 'charges.cancel' },
      schema: {
        summary: 'Cancel a charge that has not succeeded; the hold is released (at the provider too, for a provider charge)',
        description:
          'Repeating a cancel returns the cancelled charge. A succeeded charge cannot be cancelled: refund it. ' +
          'A cancel takes no parameters: no body, or `{}`; any field is refused. ' +
          'A provider charge whose hold the provider has not yet voided answers 202 with status `cancelling`: ' +
          'the ledger has released the money and nothing can capture it; the void is retried until the provider takes it. ' +
          'Poll `Location` (it becomes `cancelled`) or repeat the cancel.',
        tags: ['charges'],
        params: chargeKeyParams,
        body: ref('CancelRequest'),
        response: {
          200: jsonResponse('the cancelled charge', 'Charge'),
          202: jsonResponse('cancelled in the ledger; the provider\'s hold is still being voided (status `cancelling`)', 'Charge', {
            Location: { schema: { type: 'string' } },
            'Retry-After': { schema: { type: 'integer' } },
          }),
          ...commonProblems,
          ...bodyProblems,
          ...problemResponses({ 404: 'no charge with this key for this tenant', 409: 'the charge already succeeded or was declined' }),
        },
      },
    },
    async (request, reply) => {
      const key = chargeKeyOf(request.params);
      const charge = await context.charges.cancelChargeFromBody(request.tenant, key, bodyOf(request), { deadlineEpochMs: serviceDeadlineEpochMs(deps) });
      if (charge.status === 'cancelling') {
        // Accepted, not finished: the provider's void is still being retried.
        reply.code(202).header('location', chargeLocation(key)).header('retry-after', String(deps.retryAfterSeconds));
      }
      return chargeToWire(charge, auditFor(request));
    },
  );

  app.post<{ Params: { key: string }; Body: unknown }>(
    '/v1/charges/:key/capture',
    {
      config: { operation: 'charges.capture' },
      schema: {
        summary: 'Capture a charge created with capture "manual"',
        description: 'Captures all of the hold, or `amount` of it (the rest is released). Repeating a capture returns the captured charge.',
        tags: ['charges'],
        params: chargeKeyParams,
        body: ref('CaptureRequest'),
        response: {
          200: jsonResponse('the captured charge', 'Charge'),
          ...commonProblems,
          ...bodyProblems,
          ...problemResponses({
            404: 'no charge with this key for this tenant',
            409: 'not a manual-capture charge, or cancelled, expired, declined, or captured with another amount',
          }),
        },
      },
    },
    async (request) => {
      const key = chargeKeyOf(request.params);
      return chargeToWire(
        await context.charges.captureChargeFromBody(request.tenant, key, bodyOf(request), { deadlineEpochMs: serviceDeadlineEpochMs(deps) }),
        auditFor(request),
      );
    },
  );
}
