import type { FastifyInstance } from 'fastify';
import type { AccountsService } from '../service/accounts-service.js';
import type { AppContext } from '../runtime/app-context.js';
import type { ApiMetrics } from './metrics.js';
import type { WebhookEndpointsService } from '../service/webhook-endpoints.js';

/** Everything a route needs, resolved once from the API's options (by buildApi). */
export interface ApiDeps {
  context: AppContext;
  accounts: AccountsService;
  metrics: ApiMetrics;
  /** Webhook endpoints (outbound deliveries of events), checked through the configured outbound door. */
  webhookEndpoints: WebhookEndpointsService;
  waitBudgetMs: number;
  /** Bound on the Temporal calls of a request beyond its wait (start, query, update). */
  temporalCallTimeoutMs: number;
  retryAfterSeconds: number;
}

/**
 * Routes another module adds to the API, handed over by the code that starts it (the MCP endpoint,
 * the codec endpoint: src/cli/http-app.ts), so that src/api imports neither of them.
 */
export interface ApiRoutes {
  /** What they serve, for the log and for errors at start-up. */
  name: string;
  /**
   * `tenant`: inside the tenant scope, behind its hooks (API key authenticated, its rate limits
   * taken, a signature checked); `public`: on the app, authenticating by their own means.
   */
  scope: 'tenant' | 'public';
  register(app: FastifyInstance, deps: ApiDeps): void | Promise<void>;
}

/**
 * When a request's service call must be answered: after its wait for the outcome (none for reads,
 * cancels and captures) and one Temporal call timeout beyond it. Passed to the service, which
 * turns an expired deadline into "unavailable".
 */
export function serviceDeadlineEpochMs(deps: ApiDeps, waitMs = 0): number {
  return Date.now() + waitMs + deps.temporalCallTimeoutMs;
}
