import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import type { FastifyInstance } from 'fastify';
import type { ApiDeps } from '../api/deps.js';
import { createMcpServer } from './server.js';

/**
 * MCP over streamable HTTP at /mcp, stateless: each POST gets a fresh server bound to the tenant of
 * its API key, so any API instance can answer any request and nothing is kept between calls (the
 * idempotency keys carry all the state that matters).
 */
export function registerMcpRoute(app: FastifyInstance, deps: ApiDeps): void {
  app.post('/mcp', { schema: { summary: 'Model Context Protocol (streamable HTTP, stateless)', tags: ['mcp'] } }, async (request, reply) => {
    const server = createMcpServer({
      charges: deps.context.charges,
      accounts: deps.accounts,
      // Checked by the API's authentication hook for this request; each tool call checks its role.
      principal: async () => request.principal,
      waitBudgetMs: deps.waitBudgetMs,
    });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    reply.hijack();
    reply.raw.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(request.raw, reply.raw, request.body);
  });

  // Stateless: no server-initiated stream (GET) and no session to end (DELETE).
  for (const method of ['GET', 'DELETE'] as const) {
    app.route({
      method,
      url: '/mcp',
      schema: { hide: true },
      handler: async (_request, reply) =>
        reply
          .code(405)
          .header('allow', 'POST')
          .type('application/problem+json; charset=utf-8')
          .send({ type: 'method_not_allowed', title: 'Method not allowed', status: 405, detail: 'this MCP endpoint is stateless: POST only' }),
    });
  }
}
