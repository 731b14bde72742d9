import type { AccountsService } from '../service/accounts-service.js';
import type { AppContext } from '../runtime/app-context.js';
import type { ApiMetrics } from './metrics.js';

/** Everything a route needs, resolved once from the API's options (by buildApi). */
export interface ApiDeps {
  context: AppContext;
  accounts: AccountsService;
  metrics: ApiMetrics;
  waitBudgetMs: number;
  /** Bound on the Temporal calls of a request beyond its wait (start, query, update). */
  temporalCallTimeoutMs: number;
  retryAfterSeconds: number;
}

/**
 * When a request's service call must be answered: after its wait for the outcome (none for reads,
 * cancels and captures) and one Temporal call timeout beyond it. Passed to the service, which
 * turns an expired deadline into "unavailable".
 */
export function serviceDeadlineEpochMs(deps: ApiDeps, waitMs = 0): number {
  return Date.now() + waitMs + deps.temporalCallTimeoutMs;
}
