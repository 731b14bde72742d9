import type { FastifyInstance } from 'fastify';
import { depositToWire } from '../../service/accounts-service.js';
import { accountToWire, listToWire } from '../../service/wire.js';
import type { ApiDeps } from '../deps.js';
import { assertAccountId } from '../../service/validation.js';
import {
  adminOnlyProblems,
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
import { assertWellFormedQuery, idempotencyKeyOf, requireIdempotencyKey } from '../request-headers.js';
import { authorize } from '../../auth/principal.js';
import { permissionFor } from '../../domain/permissions.js';
import { isSystemAccountId, systemAccountIdPattern } from '../../domain/providers.js';
import { limits } from '../../domain/limits.js';
import { refuseOtherMethods } from './method-not-allowed.js';

const accountParams = {
  type: 'object',
  properties: { id: pathParameterSchemas.accountId },
  required: ['id'],
} as const;

/** A read may also name a system account (admin keys), whose id is outside the account id's characters. */
const readAccountParams = {
  type: 'object',
  properties: {
    id: {
      type: 'string',
      minLength: 1,
      maxLength: limits.accountIdMaxLength,
      // An account id, or a system account's (admin keys): either pattern, anchors taken off.
      pattern: `^(?:${unanchored(limits.accountIdPattern)}|${unanchored(systemAccountIdPattern)})$`,
      description: 'the account id, or for admin keys a system account\'s (e.g. @provider/stripe/USD); percent-encoded',
    },
  },
  required: ['id'],
} as const;

function unanchored(pattern: RegExp): string {
  return pattern.source.replace(/^\^/, '').replace(/\$$/, '');
}

export function registerAccountRoutes(app: FastifyInstance, deps: ApiDeps): void {
  const { accounts } = deps;
  refuseOtherMethods(app, '/v1/accounts', ['GET', 'POST']);
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

  app.get<{ Querystring: Record<string, unknown> }>(
    '/v1/accounts',
    {
      config: { operation: 'accounts.read' },
      schema: {
        summary: 'The tenant\'s accounts and their balances, newest first',
        description:
          'Pages of at most `limit` accounts. The next page: `starting_after` = the last account\'s `id`; the previous ' +
          'one: `ending_before` = the first account\'s. A cursor that names no account of this list is refused (400 ' +
          'naming the parameter). Admin keys also see the system accounts (`@provider/<provider>/<currency>`, ' +
          '`@external/<currency>`); agent keys never do.',
        tags: ['accounts'],
        querystring: {
          type: 'object',
          properties: pageQueryProperties('an account id'),
          additionalProperties: false,
        },
        response: {
          200: listResponse('a page of accounts', 'Account'),
          ...commonProblems,
        },
      },
    },
    async (request) => {
      assertWellFormedQuery(request);
      const includeSystem = permissionFor(request.principal.role, 'system_accounts.read').allowed;
      const page = await accounts.listAccountsFromQuery(request.tenant, request.query, { includeSystem });
      return listToWire(page.accounts.map(accountToWire), page.hasMore, '/v1/accounts');
    },
  );

  app.get<{ Params: { id: string } }>(
    '/v1/accounts/:id',
    {
      config: { operation: 'accounts.read' },
      schema: {
        summary: 'An account and its balances (posted, pending, available)',
        description:
          'Admin keys may also read the tenant\'s system accounts, percent-encoded: ' +
          '`/v1/accounts/%40provider%2Fstripe%2FUSD` is the Stripe clearing account for USD (negative: what Stripe owes ' +
          'the tenant). An agent key asking for one is refused (403 `forbidden`).',
        tags: ['accounts'],
        params: readAccountParams,
        response: {
          200: jsonResponse('the account', 'Account'),
          ...commonProblems,
          ...problemResponses({
            403: 'a system account asked for with an agent key (`forbidden`, `operation: system_accounts.read`)',
            404: 'no account with this id for this tenant',
          }),
        },
      },
    },
    async (request) => {
      const { id } = request.params;
      // A system account's id is public (charges name it as their payer), its balance is not an agent's business.
      const system = isSystemAccountId(id);
      if (system) authorize(request.principal, 'system_accounts.read');
      return accountToWire(await accounts.getAccount(request.tenant, id, 'id', { includeSystem: system }));
    },
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
