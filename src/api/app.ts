import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import Fastify, { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import { IdempotencyConflictError, OverloadedError, ValidationError } from '../domain/errors.js';
import { asUnavailable } from '../service/unavailable.js';
import type { AppContext } from '../runtime/app-context.js';
import type { ApiDeps, ApiRoutes } from './deps.js';
import { authenticate, verifySignedRequest } from './authenticate.js';
import { authorize, type Principal } from '../auth/principal.js';
import type { Operation } from '../domain/permissions.js';
import { ApiMetrics } from './metrics.js';
import { registerOpenApi } from './openapi.js';
import { refuseUnknownQueryParameters } from './query-parameters.js';
import { problemFor, sendProblem, type WireProblem } from '../http/problem.js';
import { strictJsonBodyParser } from '../http/json-body.js';
import { registerAccountRoutes } from './routes/accounts.js';
import { registerChargeRoutes } from './routes/charges.js';
import { registerHealthRoutes } from './routes/health.js';
import { registerIdempotencyTokenRoutes } from './routes/idempotency-tokens.js';
import { registerRefundRoutes } from './routes/refunds.js';
import { registerEventRoutes } from './routes/events.js';
import { registerWebhookRoutes } from './routes/webhooks.js';
import { registerProviderEventRoutes } from './routes/provider-events.js';
import { registerWebhookEndpointRoutes } from './routes/webhook-endpoints.js';
import { configuredProviderConnectors } from '../providers/configured.js';
import type { ProviderConnectors } from '../providers/connectors.js';
import { rateLimitHook } from '../http/rate-limit-hook.js';
import { addServerTiming } from '../http/server-timing.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the authentication hook on every request of the tenant scope (/v1, /mcp): the principal's tenant. */
    tenant: string;
    /** Who the request acts as (tenant, key id, role); set with `tenant`. */
    principal: Principal;
    /** The error behind a 5xx answer, kept for its log line. */
    failure: unknown;
    /** A JSON body's bytes as received: what a signed request's Content-Digest covers. */
    rawBody: Buffer | undefined;
  }
  interface FastifyContextConfig {
    /**
     * What a /v1 route does, as the permission table (src/domain/permissions.ts) names it: the
     * authentication hook refuses a key whose role does not allow it before the body is read.
     * Routes without one (405 answers, /mcp, whose tools check each call) need only a valid key.
     */
    operation?: Operation;
  }
}

/** The response header carrying the request id; a caller's own (if well-formed) is reused, so one id follows a request across services. */
export const requestIdHeader = 'x-request-id';

/** Ids a caller may choose: short, and nothing that could forge or split a log line. */
const callerRequestIdPattern = /^[A-Za-z0-9._:-]{1,128}$/;

function requestIdFor(request: IncomingMessage): string {
  const given = request.headers[requestIdHeader];
  if (typeof given === 'string' && callerRequestIdPattern.test(given)) return given;
  return `req_${randomUUID()}`;
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
  /**
   * Routes of other modules to serve with the API (the MCP endpoint, the codec endpoint), given by
   * the code that starts it (src/cli/http-app.ts); none by default.
   */
  extraRoutes?: readonly ApiRoutes[];
  /** pino options (or false). Every 5xx is logged through it, with the request id its problem document carries. */
  logger?: FastifyServerOptions['logger'];
  /** Fastify's line per request and response at info level (on by default when there is a logger). */
  logRequests?: boolean;
  version?: string;
  /** Whose events POST /v1/provider-events/{provider} verifies; from the environment (src/providers/configured.ts) by default. */
  providers?: ProviderConnectors;
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
    accounts: context.accounts,
    metrics: new ApiMetrics({ readings: context.readings, admission: () => context.charges.admission }),
    webhookEndpoints: context.webhookEndpoints,
    waitBudgetMs: Math.min(options.waitBudgetMs ?? context.config.CHARGE_WAIT_BUDGET_MS, context.config.CHARGE_WAIT_BUDGET_MS),
    temporalCallTimeoutMs: options.temporalCallTimeoutMs ?? apiDefaults.temporalCallTimeoutMs,
    retryAfterSeconds: options.retryAfterSeconds ?? apiDefaults.retryAfterSeconds,
  };

  const app = Fastify({
    logger: options.logger ?? false,
    logController: new LogController({ disableRequestLogging: options.logRequests === false, requestIdLogLabel: 'request_id' }),
    genReqId: requestIdFor,
    bodyLimit: bodyLimitBytes,
    requestTimeout: options.requestTimeoutMs ?? apiDefaults.requestTimeoutMs,
    // Idempotency keys are visible ASCII and may contain "/" or "%": they travel percent-encoded.
    routerOptions: { maxParamLength: 1024 },
    return503OnClosing: true,
    // A path fastify cannot decode (broken percent-encoding) or whose segment is longer than any
    // key could be: a problem document naming the path, like every other refusal.
    frameworkErrors: (error, _request, reply) => {
      const tooLong = error.code === 'FST_ERR_MAX_PARAM_LENGTH';
      const message = tooLong
        ? 'has a segment longer than any id or key can be (at most 1024 characters)'
        : 'is not valid percent-encoded UTF-8';
      void sendProblem(reply, problemFor(new ValidationError([{ field: 'path', message }]), deps.retryAfterSeconds));
    },
  });

  // Request bodies are validated by the service (zod, one error per field) and responses
  // are built by wire.ts: the route schemas exist for the OpenAPI document only.
  app.setValidatorCompiler(() => (data) => ({ value: data }));
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));

  // JSON only: a text/plain body would otherwise arrive as a string and fail as "not an object".
  // Every JSON body is read by the strict decoder (src/http/json-body.ts): taken exactly as written
  // or refused naming the field, never repaired, rounded or collapsed.
  app.removeContentTypeParser(['application/json', 'text/plain']);
  app.addContentTypeParser('application/json', { parseAs: 'buffer', bodyLimit: bodyLimitBytes }, strictJsonBodyParser);

  app.decorateRequest('tenant', '');
  app.decorateRequest('principal', null as unknown as Principal);
  app.decorateRequest('failure', undefined);
  app.decorateRequest('rawBody', undefined);
  app.decorateRequest('signatureKey', null);
  app.decorateRequest('chargeKeyInLedger', null);
  app.addHook('onRequest', async (request, reply) => {
    reply.header(requestIdHeader, request.id);
  });
  // HTTP/1.1 allows one Host (RFC 9112 §3.2). Node keeps the first of two, while a proxy in front
  // may have routed by the second: refused before authentication, naming the header.
  app.addHook('onRequest', async (request) => {
    const hosts = headerCount(request.raw.rawHeaders, 'host');
    if (hosts > 1) {
      throw new ValidationError([{ field: 'Host', message: `appears ${hosts} times: a request carries exactly one Host header` }]);
    }
  });
  app.setErrorHandler((error, request, reply) => {
    const found = problemFor(asUnavailable(error), deps.retryAfterSeconds);
    if (error instanceof IdempotencyConflictError) deps.metrics.idempotencyConflict();
    // A refusal under overload is the answer chosen on purpose, many a second: its line names it
    // without a stack (the chargeguard_charges_refused_overloaded counter counts them).
    if (found.body.status >= 500 && !(error instanceof OverloadedError)) request.failure = error;
    return sendProblem(reply, { ...found, body: { ...found.body, instance: request.url } });
  });
  // Every 5xx, whoever answered it (error handler, readiness probe, fastify itself), gets one line
  // naming the request id that its X-Request-Id header and problem document carry.
  app.addHook('onSend', async (request, reply, payload) => {
    if (reply.statusCode >= 500) {
      const problem = problemIn(payload);
      const line = {
        method: request.method,
        url: request.url,
        status: reply.statusCode,
        ...(problem?.dependency ? { dependency: problem.dependency } : {}),
        ...(request.failure !== undefined ? { err: request.failure } : {}),
      };
      const message = `${reply.statusCode} ${problem?.detail ?? 'server error'}`;
      // A dependency outage (503) is the expected answer to a fault elsewhere; a 500 is a bug here.
      if (reply.statusCode === 503) request.log.warn(line, message);
      else request.log.error(line, message);
    }
    return payload;
  });
  app.setNotFoundHandler((request, reply) =>
    sendProblem(reply, {
      body: { type: 'not_found', title: 'Not found', status: 404, detail: `no route ${request.method} ${request.url}` },
      headers: {},
    }),
  );
  // After authentication and rate limits (onRequest), before any handler or signature check.
  app.addHook('preValidation', refuseUnknownQueryParameters);
  app.addHook('onResponse', async (request, reply) => {
    deps.metrics.requestDuration.observe(
      { method: request.method, route: request.routeOptions.url ?? 'unmatched', status_code: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
  });

  await registerOpenApi(app, { amountMinorMax: context.config.CHARGE_AMOUNT_MINOR_MAX, version: options.version ?? '0.1.0' });
  registerHealthRoutes(app, deps);
  // Routes with their own authentication, e.g. Temporal's remote codec protocol for the Web UI,
  // with the operator's token (docs/back-door.md).
  const extraRoutes = options.extraRoutes ?? [];
  for (const routes of extraRoutes) if (routes.scope === 'public') await routes.register(app, deps);
  // Provider callbacks: authenticated by their signature, not by an API key, so outside the tenant scope.
  await registerWebhookRoutes(app, deps);
  await registerProviderEventRoutes(app, deps, { connectors: options.providers ?? configuredProviderConnectors() });

  // Everything under /v1 (and /mcp) belongs to a tenant: the key, and whether its role allows the
  // route's operation, are checked before the body is read.
  await app.register(async (tenantScope) => {
    tenantScope.addHook('onRequest', async (request, reply) => {
      const startedAt = performance.now();
      const principal = await authenticate(request, reply, context);
      addServerTiming(reply, 'auth', startedAt);
      request.principal = principal;
      request.tenant = principal.tenant;
      const operation = request.routeOptions.config.operation;
      if (operation !== undefined) authorize(principal, operation);
    });
    // The whole of the request as this process saw it, beside its stages (auth, ratelimit,
    // admission): what is left of a caller's latency was spent before the request was read or in
    // the network.
    tenantScope.addHook('onSend', async (_request, reply, payload) => {
      addServerTiming(reply, 'total', performance.now() - reply.elapsedTime);
      return payload;
    });
    // Request rate and open holds of the key and its tenant (docs/limits.md): after authentication,
    // so a request without a valid key spends no key's tokens (its source address's: authenticate).
    tenantScope.addHook('onRequest', rateLimitHook(context));
    // A key that requires signed requests: checked once the body is read, before any handler.
    tenantScope.addHook('preValidation', async (request) => verifySignedRequest(request, context.keys));
    registerChargeRoutes(tenantScope, deps);
    registerIdempotencyTokenRoutes(tenantScope, deps);
    registerRefundRoutes(tenantScope, deps);
    registerAccountRoutes(tenantScope, deps);
    registerWebhookEndpointRoutes(tenantScope, deps);
    registerEventRoutes(tenantScope, deps);
    for (const routes of extraRoutes) if (routes.scope === 'tenant') await routes.register(tenantScope, deps);
  });

  return app;
}

/** How many times a header appears in Node's raw list (name, value, name, value, …), its name in any case. */
function headerCount(rawHeaders: readonly string[], lowerCaseName: string): number {
  let count = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) if (rawHeaders[i]!.toLowerCase() === lowerCaseName) count += 1;
  return count;
}

function problemIn(payload: unknown): Partial<WireProblem> | null {
  if (typeof payload !== 'string') return null;
  try {
    const parsed = JSON.parse(payload) as unknown;
    return parsed !== null && typeof parsed === 'object' ? (parsed as Partial<WireProblem>) : null;
  } catch {
    return null;
  }
}
