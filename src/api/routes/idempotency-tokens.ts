import type { FastifyInstance } from 'fastify';
import type { ApiDeps } from '../deps.js';
import { bodyProblems, commonProblems, jsonResponse, ref } from '../openapi.js';
import { bodyOf } from '../request-headers.js';
import { refuseOtherMethods } from './method-not-allowed.js';

export function registerIdempotencyTokenRoutes(app: FastifyInstance, deps: ApiDeps): void {
  const { tokens } = deps.context;
  refuseOtherMethods(app, '/v1/idempotency-tokens', ['POST']);

  app.post<{ Body: unknown }>(
    '/v1/idempotency-tokens',
    {
      config: { operation: 'idempotency_tokens.create' },
      schema: {
        summary: 'Issue a single-use idempotency token, for callers that cannot make good keys (forms)',
        description:
          'Send the token as the `Idempotency-Token` header of one `POST /v1/charges`, instead of an `Idempotency-Key`. ' +
          'Its first use makes it that charge\'s key; every repeat (a double submit, a retry) replays that charge. ' +
          'Unused, it is refused after `expires_at`; used, it never expires. Issuing takes no key: a repeated ' +
          'request just issues another token.',
        tags: ['idempotency tokens'],
        body: ref('IssueIdempotencyTokenRequest'),
        response: {
          201: jsonResponse('issued', 'IdempotencyToken'),
          ...commonProblems,
          ...bodyProblems,
        },
      },
    },
    async (request, reply) => {
      const issued = await tokens.issue(request.tenant, request.principal.keyId, bodyOf(request));
      // An unused token spends like a key: no cache along the way should keep a copy.
      reply.header('cache-control', 'no-store');
      return reply.code(201).send(issued);
    },
  );
}
