import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { ApiDeps, ApiRoutes } from '../api/deps.js';
import { strictJsonRefusalOf } from '../http/json-body.js';
import { sendProblem } from '../http/problem.js';
import { admit, mcpRateLimitSettings } from '../http/rate-limit-hook.js';
import { idempotencyKeyPattern } from '../domain/limits.js';
import { mcpBatchMaxCalls } from '../domain/rate-limits.js';
import type { StrictJsonError } from '../support/strict-json.js';
import { createMcpServer } from './server.js';

/** The origins a browser may call /mcp from: the configured list, comma-separated; empty by default. */
export function allowedMcpOrigins(setting: string): ReadonlySet<string> {
  return new Set(
    setting
      .split(',')
      .map((origin) => origin.trim())
      .filter((origin) => origin !== ''),
  );
}

/**
 * MCP requires servers to validate Origin against DNS rebinding: a page on another site that a
 * browser was tricked into sending here carries its own Origin. Requests without one (agents, CLIs,
 * desktop clients) are not browsers' and are served; an Origin not in the allow-list gets 403
 * before the body is read. The SDK's own check (allowedOrigins) lets everything through when its
 * list is empty, so this one is done here.
 */
function refuseForeignOrigin(allowed: ReadonlySet<string>) {
  return async (request: FastifyRequest, reply: FastifyReply) => {
    const origin = request.headers.origin;
    if (origin === undefined || allowed.has(origin)) return;
    return sendProblem(reply, {
      body: {
        type: 'origin_not_allowed',
        title: 'Forbidden',
        status: 403,
        detail:
          `Origin ${JSON.stringify(origin.slice(0, 200))} may not call this MCP endpoint; ` +
          'browser origins must be listed in MCP_ALLOWED_ORIGINS (clients that are not browsers send no Origin)',
      },
      headers: {},
    });
  };
}

/** What a POST body asks of the limiter: one token per JSON-RPC call, and the charges it would create. */
export function callsOf(body: unknown): { calls: number; chargeKeys: string[] } {
  const messages = Array.isArray(body) ? body : [body];
  let calls = 0;
  const chargeKeys: string[] = [];
  for (const message of messages) {
    if (message === null || typeof message !== 'object' || typeof (message as { method?: unknown }).method !== 'string') continue;
    calls += 1;
    const { method, params } = message as { method: string; params?: { name?: unknown; arguments?: { idempotency_key?: unknown } } };
    const key = params?.arguments?.idempotency_key;
    if (method === 'tools/call' && params?.name === 'create_charge' && typeof key === 'string' && idempotencyKeyPattern.test(key)) {
      chargeKeys.push(key);
    }
  }
  return { calls, chargeKeys };
}

/**
 * A JSON-RPC error for a body the strict decoder refused (src/support/strict-json.ts): Parse error
 * for bytes that are not UTF-8 or not JSON, Invalid Request for JSON with a member the rules refuse
 * (a duplicate name, a prototype name, a number that is not a safe integer literal). The message
 * names the field as the HTTP API does (`params.arguments.amount`); `data.errors` carries it too.
 * No id: the request was not read far enough to know it.
 */
export function jsonRpcRefusal(refusal: StrictJsonError) {
  const [code, label] = refusal.kind === 'member' ? [-32600, 'Invalid Request'] : [-32700, 'Parse error'];
  return {
    jsonrpc: '2.0',
    error: {
      code,
      message: `${label}: ${refusal.field} ${refusal.problem}. Nothing in it was run.`,
      data: { errors: [{ field: refusal.field, message: refusal.problem }] },
    },
    id: null,
  };
}

/**
 * MCP over streamable HTTP at /mcp, stateless: each POST gets a fresh server bound to the tenant of
 * its API key, so any API instance can answer any request and nothing is kept between calls (the
 * idempotency keys carry all the state that matters).
 *
 * Limits: the tenant scope's hook took one request token; a JSON-RPC batch (which MCP 2025-06-18
 * removed but the SDK still parses, up to 100 messages) takes one more per further call, so a batch
 * of 20 tools/call costs what 20 requests cost. A batch over mcpBatchMaxCalls is refused whole,
 * before any of it runs. A create_charge call is checked against the open holds limits like
 * POST /v1/charges, the calls of one batch together.
 */
export function registerMcpRoute(app: FastifyInstance, deps: ApiDeps): void {
  const settings = mcpRateLimitSettings(deps.context);
  const onRequest = refuseForeignOrigin(allowedMcpOrigins(deps.context.config.MCP_ALLOWED_ORIGINS));

  app.post(
    '/mcp',
    {
      onRequest,
      // The API's strict JSON parser reads the body before the SDK sees it: the transport is handed
      // the value already decoded (handleRequest's parsedBody), never the bytes. A body it refuses
      // is answered in the protocol's terms; every other error goes on to the API's handler.
      errorHandler: (error, _request, reply) => {
        const refusal = strictJsonRefusalOf(error);
        if (refusal === undefined) throw error;
        void reply.code(400).type('application/json').send(jsonRpcRefusal(refusal));
      },
      schema: { summary: 'Model Context Protocol (streamable HTTP, stateless)', tags: ['mcp'] },
    },
    async (request, reply) => {
      if (Array.isArray(request.body) && request.body.length > mcpBatchMaxCalls) {
        return reply
          .code(400)
          .type('application/json')
          .send({
            jsonrpc: '2.0',
            error: {
              code: -32600,
              message:
                `Invalid Request: a batch of ${request.body.length} JSON-RPC messages; at most ${mcpBatchMaxCalls} ` +
                '(mcpBatchMaxCalls) per request. Nothing in it was run: send them in smaller batches or one by one.',
            },
            id: null,
          });
      }
      const { calls, chargeKeys } = callsOf(request.body);
      if (calls > 1 || chargeKeys.length > 0) {
        await admit(deps.context, settings, request, reply, { cost: Math.max(0, calls - 1), chargeKeys });
      }

      const server = createMcpServer({
        charges: deps.context.charges,
        accounts: deps.accounts,
        webhookEndpoints: deps.webhookEndpoints,
        // Checked by the API's authentication hook for this request; each tool call checks its role.
        principal: async () => request.principal,
        waitBudgetMs: deps.waitBudgetMs,
      });
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
      // The limiter's RateLimit fields go out with the transport's answer too.
      for (const [name, value] of Object.entries(reply.getHeaders())) {
        if (value !== undefined) reply.raw.setHeader(name, value);
      }
      reply.hijack();
      reply.raw.on('close', () => {
        void transport.close();
        void server.close();
      });
      await server.connect(transport);
      await transport.handleRequest(request.raw, reply.raw, request.body);
    },
  );

  // Stateless: no server-initiated stream (GET) and no session to end (DELETE); any other method is
  // refused the same way (405 with Allow, not 404: the path exists).
  const otherMethods = (['GET', 'DELETE', 'PUT', 'PATCH', 'TRACE', 'QUERY'] as const).filter((method) => app.supportedMethods.includes(method));
  const refuse = async (_request: FastifyRequest, reply: FastifyReply) =>
    reply
      .code(405)
      .header('allow', 'POST')
      .type('application/problem+json; charset=utf-8')
      .send({ type: 'method_not_allowed', title: 'Method not allowed', status: 405, detail: 'this MCP endpoint is stateless: POST only' });
  for (const method of otherMethods) {
    app.route({
      method,
      url: '/mcp',
      // Answered before the body is read: a QUERY without a content type is told its method is wrong.
      onRequest: [onRequest, refuse],
      schema: { hide: true },
      handler: refuse,
    });
  }
}

/** /mcp as the API serves it: in the tenant scope, so every request's key is checked first. */
export const mcpRoutes: ApiRoutes = { name: 'MCP (streamable HTTP)', scope: 'tenant', register: registerMcpRoute };
