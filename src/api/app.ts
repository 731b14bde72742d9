import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { AccountsClient } from '../client/accounts-client.js';
import { IdempotencyConflictError } from '../client/errors.js';
import type { AppContext } from '../runtime/app-context.js';
import { authenticate } from './authenticate.js';
import { ApiMetrics } from './metrics.js';
import { registerOpenApi } from './openapi.js';
import { problemFor, sendProblem } from './problem.js';
import { registerAccountRoutes } from './routes/accounts.js';
import { registerChargeRoutes } from './routes/charges.js';
import { registerHealthRoutes } from './routes/health.js';
import { registerRefundRoutes } from './routes/refunds.js';
import { registerMcpRoute } from '../mcp/http.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the authentication hook on every /v1 and /mcp request. */
    tenant: string;
  }
}

export interface ApiOptions {
  context: AppContext;
  /** Bodies larger than this are refused with 413 before they are parsed. */
  bodyLimitBytes?: number;
  /** The whole request (headers and body) must arrive within this; guards against slow clients. */
  requestTimeoutMs?: number;
  /** How long POST /v1/charges waits for the outcome before answering 202; defaults to the config's. */
  waitBudgetMs?: number;
  /** Bound on the Temporal calls of a request beyond the wait budget (start, query, update). */
  temporalCallTimeoutMs?: number;
  /** What 202 and 503 answers tell callers to wait before retrying. */
  retryAfterSeconds?: number;
  /** Serve the MCP streamable HTTP endpoint at /mcp (on by default). */
  mcp?: boolean;
  logger?: FastifyServerOptions['logger'];
  version?: string;
}

/** Everything a route needs, resolved once from the options. */
export interface ApiDeps {
  context: AppContext;
  accounts: AccountsClient;
  metrics: ApiMetrics;
  waitBudgetMs: number;
  temporalCallTimeoutMs: number;
  retryAfterSeconds: number;
}

export const apiDefaults = {
  bodyLimitBytes: 64 * 1024,
  requestTimeoutMs: 30_000,
  temporalCallTimeoutMs: 5_000,
  retryAfterSeconds: 1,
} as const;

/**
 * The HTTP API as a fastify app, not yet listening: the caller decides where (`app.listen`), so
 * tests run it on 127.0.0.1 port 0 and the CLI on a configured port.
 */
export async function buildApi(options: ApiOptions): Promise<FastifyInstance> {
  const { context } = options;
  const bodyLimitBytes = options.bodyLimitBytes ?? apiDefaults.bodyLimitBytes;
  const deps: ApiDeps = {
    context,
    accounts: new AccountsClient({ ledger: context.ledger, amountMinorMax: context.config.CHARGE_AMOUNT_MINOR_MAX }),
    metrics: new ApiMetrics(),
    waitBudgetMs: Math.min(options.waitBudgetMs ?? context.config.CHARGE_WAIT_BUDGET_MS, context.config.CHARGE_WAIT_BUDGET_MS),
    temporalCallTimeoutMs: options.temporalCallTimeoutMs ?? apiDefaults.temporalCallTimeoutMs,
    retryAfterSeconds: options.retryAfterSeconds ?? apiDefaults.retryAfterSeconds,
  };

  const app = Fastify({
    logger: options.logger ?? false,
    bodyLimit: bodyLimitBytes,
    requestTimeout: options.requestTimeoutMs ?? apiDefaults.requestTimeoutMs,
    // Idempotency keys are visible ASCII and may contain "/" or "%": they travel percent-encoded.
    routerOptions: { maxParamLength: 1024 },
    return503OnClosing: true,
  });

  // Request bodies are validated by the client module (zod, one error per field) and responses
  // are built by wire.ts: the route schemas exist for the OpenAPI document only.
  app.setValidatorCompiler(() => (data) => ({ value: data }));
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));

  // An empty body with a JSON content type (curl -H 'Content-Type: application/json' -X POST)
  // means "no fields", as for a cancel or a full capture.
  const defaultJsonParser = app.getDefaultJsonParser('error', 'error');
  // JSON only: a text/plain body would otherwise arrive as a string and fail as "not an object".
  app.removeContentTypeParser(['application/json', 'text/plain']);
  app.addContentTypeParser('application/json', { parseAs: 'string', bodyLimit: bodyLimitBytes }, (request, body, done) => {
    if (body.toString().trim() === '') {
      done(null, undefined);
      return;
    }
    void defaultJsonParser(request, body.toString(), done);
  });

  app.decorateRequest('tenant', '');
  app.setErrorHandler((error, request, reply) => {
    const found = problemFor(error, deps.retryAfterSeconds);
    if (error instanceof IdempotencyConflictError) deps.metrics.idempotencyConflict();
    if (found.body.status >= 500) request.log.error({ err: error }, found.body.detail);
    return sendProblem(reply, { ...found, body: { ...found.body, instance: request.url } });
  });
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, {
      body: { type: 'not_found', title: 'Not found', status: 404, detail: `no route ${request.method} ${request.url}` },
      headers: {},
    }),
  );
  app.addHook('onResponse', async (request, reply) => {
    deps.metrics.requestDuration.observe(
      { method: request.method, route: request.routeOptions.url ?? 'unmatched', status_code: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
  });

  await registerOpenApi(app, { amountMinorMax: context.config.CHARGE_AMOUNT_MINOR_MAX, version: options.version ?? '0.1.0' });
  registerHealthRoutes(app, deps);

  // Everything under /v1 (and /mcp) belongs to a tenant: the key is checked before the body is read.
  await app.register(async (tenantScope) => {
    tenantScope.addHook('onRequest', async (request) => {
      request.tenant = await authenticate(request, context.ledger);
    });
    registerChargeRoutes(tenantScope, deps);
    registerRefundRoutes(tenantScope, deps);
    registerAccountRoutes(tenantScope, deps);
    if (options.mcp ?? true) registerMcpRoute(tenantScope, deps);
  });

  return app;
}
