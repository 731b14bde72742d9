import type { FastifyInstance } from 'fastify';
import { depositToWire } from '../../service/accounts-service.js';
import { accountToWire } from '../../service/wire.js';
import type { ApiDeps } from '../deps.js';
import { assertAccountId } from '../../service/validation.js';
import {
  adminOnlyProblems,
  bodyProblems,
  commonProblems,
  idempotencyKeyParameter,
  jsonResponse,
  pathParameterSchemas,
  problemResponses,
  ref,
  replayHeaders,
} from '../openapi.js';
import { idempotencyKeyOf, requireIdempotencyKey } from '../request-headers.js';
import { refuseOtherMethods } from './method-not-allowed.js';

const accountParams = {
  type: 'object',
  properties: { id: pathParameterSchemas.accountId },
  required: ['id'],
} as const;

export function registerAccountRoutes(app: FastifyInstance, deps: ApiDeps): void {
  const { accounts } = deps;
  refuseOtherMethods(app, '/v1/accounts', ['POST']);
  refuseOtherMethods(app, '/v1/accounts/:id', ['GET']);
  refuseOtherMethods(app, '/v1/accounts/:id/deposits', ['POST']);

  app.post<{ Body: unknown }>(
    '/v1/accounts',
    {
      config: { operation: 'accounts.open' },
      schema: {
        summary: 'Open an account (one currency)',
        description:
          'Admin keys only. ' +
          'Without `id`, the account id is derived from the Idempotency-Key, so a retry returns the same account. ' +
          'Repeating a create returns the account with `Idempotent-Replayed: true`.',
        tags: ['accounts'],
        headers: idempotencyKeyParameter(true, 'reuse verbatim on every retry of this create'),
        body: ref('CreateAccountRequest'),
        response: {
          200: jsonResponse('the account already existed with these settings', 'Account', replayHeaders),
          201: jsonResponse('created', 'Account'),
          ...commonProblems,
          ...adminOnlyProblems,
          ...bodyProblems,
          ...problemResponses({
            409: 'the id is taken by an account with other settings',
            422: 'the key was first used to create an account with other settings',
          }),
        },
      },
    },
    async (request, reply) => {
      const key = requireIdempotencyKey(request);
      const { account, created } = await accounts.createAccount(request.tenant, key, request.body);
      if (!created) reply.header('idempotent-replayed', 'true');
      reply.header('location', `/v1/accounts/${encodeURIComponent(account.id)}`);
      return reply.code(created ? 201 : 200).send(accountToWire(account));
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/accounts/:id',
    {
      config: { operation: 'accounts.read' },
      schema: {
        summary: 'An account and its balances (posted, pending, available)',
        tags: ['accounts'],
        params: accountParams,
        response: {
          200: jsonResponse('the account', 'Account'),
          ...commonProblems,
          ...problemResponses({ 404: 'no account with this id for this tenant' }),
        },
      },
    },
    async (request) => accountToWire(await accounts.getAccount(request.tenant, request.params.id, 'id')),
  );

  app.post<{ Params: { id: string }; Body: unknown }>(
    '/v1/accounts/:id/deposits',
    {
      config: { operation: 'accounts.deposit' },
      schema: {
        summary: 'Deposit money into an account, exactly once',
        description:
          'Admin keys only. Exactly-once per Idempotency-Key, or per `external_id` (the payment provider\'s id, for ' +
          'webhooks that are redelivered): one of the two is required; when both are given they must be equal (else 400).',
        tags: ['accounts'],
        params: accountParams,
        headers: idempotencyKeyParameter(false, 'required unless the body carries external_id'),
        body: ref('DepositRequest'),
        response: {
          200: jsonResponse('replay: this deposit was already made', 'Deposit', replayHeaders),
          201: jsonResponse('deposited', 'Deposit'),
          ...commonProblems,
          ...adminOnlyProblems,
          ...bodyProblems,
          ...problemResponses({
            404: 'no account with this id for this tenant',
            422: 'the key or external_id was first used for a different deposit',
          }),
        },
      },
    },
    async (request, reply) => {
      const accountId = assertAccountId(request.params.id, 'id');
      const { deposit, replayed } = await accounts.deposit(request.tenant, accountId, idempotencyKeyOf(request), request.body, request.principal.keyId);
      if (replayed) reply.header('idempotent-replayed', 'true');
      return reply.code(replayed ? 200 : 201).send(depositToWire(deposit));
    },
  );
}
