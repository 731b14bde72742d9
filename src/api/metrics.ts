import type { FastifyReply, FastifyRequest } from 'fastify';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { secretTokenMatches } from '../support/secret-token.js';
import { UnauthorizedError } from '../domain/errors.js';
import { bearerToken } from '../http/bearer-token.js';
import { sendProblem } from '../http/problem.js';
import { isLoopback } from '../http/source-address.js';
import type { ChargeReply } from '../service/charge-service.js';
import type { ChargeAdmission } from '../service/admission.js';
import type { LedgerReadings } from '../service/ledger-readings.js';

/**
 * Prometheus metrics of one API instance. Each app has its own registry, so several apps in one
 * process (tests, the MCP endpoint beside the API) never register a metric twice.
 */
export class ApiMetrics {
  readonly registry = new Registry();
  private readonly chargesStarted: Counter;
  private readonly replaysServed: Counter;
  private readonly idempotencyConflicts: Counter;
  private readonly declines: Counter;
  private readonly outcomes: Counter<'status'>;
  readonly requestDuration: Histogram<'method' | 'route' | 'status_code'>;

  /**
   * With `readings`, each scrape also reads how many holds are past their expiry (one indexed query,
   * on the partial index of TRIED holds). A hold stays TRIED past its expiry only when nothing
   * settled it: its workflow is gone or stuck, and the hold sweeper has not reached it yet.
   */
  constructor(
    options: {
      defaultMetrics?: boolean;
      readings?: Pick<LedgerReadings, 'overdueHolds' | 'pendingProviderVoids'>;
      /** Read at each scrape, not at construction: the app (and its OpenAPI document) is built before any service is used. */
      admission?: () => ChargeAdmission | null;
    } = {},
  ) {
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
    const registers = [this.registry];
    const readings = options.readings;
    if (readings) {
      let overdue: ReturnType<LedgerReadings['overdueHolds']> | null = null;
      // Both gauges are read in one scrape: one query serves them both.
      const read = () => (overdue ??= readings.overdueHolds().finally(() => setImmediate(() => (overdue = null))));
      new Gauge({
        name: 'chargeguard_holds_overdue',
        help: 'holds still reserved (TRIED) past their hold_expires_at',
        registers,
        async collect() {
          this.set((await read()).count);
        },
      });
      new Gauge({
        name: 'chargeguard_holds_overdue_oldest_seconds',
        help: 'how long past its expiry the most overdue hold is (0 when none is)',
        registers,
        async collect() {
          this.set((await read()).oldestOverdueSeconds);
        },
      });
      // Voids the provider keeps refusing (or that no worker can send): the ledger released the
      // money, the provider still holds the payer's card. Whichever worker retries them, the ledger
      // knows them all; the worker's log names each charge on every failed attempt.
      let voids: ReturnType<LedgerReadings['pendingProviderVoids']> | null = null;
      const readVoids = () => (voids ??= readings.pendingProviderVoids().finally(() => setImmediate(() => (voids = null))));
      new Gauge({
        name: 'chargeguard_provider_voids_pending',
        help: 'provider charges cancelled in the ledger whose void at the provider is not recorded yet (status cancelling)',
        registers,
        async collect() {
          this.set((await readVoids()).count);
        },
      });
      new Gauge({
        name: 'chargeguard_provider_voids_pending_oldest_seconds',
        help: 'how long ago the oldest of them was cancelled in the ledger (0 when none is pending)',
        registers,
        async collect() {
          this.set((await readVoids()).oldestSeconds);
        },
      });
    }
    const admission = options.admission;
    if (admission !== undefined) {
      new Gauge({
        name: 'chargeguard_charges_in_flight',
        help: 'new charges this process admitted that are not yet decided (bounded by CHARGE_ADMISSION_MAX_IN_FLIGHT)',
        registers,
        collect() {
          this.set(admission()?.chargesInFlight ?? 0);
        },
      });
      new Gauge({
        name: 'chargeguard_charges_refused_overloaded',
        help: 'new charges this process refused (503 overloaded) since it started, every slot being taken',
        registers,
        collect() {
          this.set(admission()?.refused ?? 0);
        },
      });
    }
    this.chargesStarted = new Counter({
      name: 'chargeguard_charges_started_total',
      help: 'charge requests that started a new charge (not replays)',
      registers,
    });
    this.replaysServed = new Counter({
      name: 'chargeguard_charge_replays_total',
      help: 'charge requests answered from an earlier request with the same idempotency key',
      registers,
    });
    this.idempotencyConflicts = new Counter({
      name: 'chargeguard_idempotency_conflicts_total',
      help: 'requests refused because their idempotency key was first used for a different request',
      registers,
    });
    this.declines = new Counter({
      name: 'chargeguard_charges_declined_total',
      help: 'charges the ledger declined (counted once per charge, not per replay)',
      registers,
    });
    this.outcomes = new Counter({
      name: 'chargeguard_charge_outcomes_total',
      help: 'charges started through this instance, by the status they were answered with',
      labelNames: ['status'],
      registers,
    });
    this.requestDuration = new Histogram({
      name: 'chargeguard_http_request_duration_seconds',
      help: 'HTTP request latency, by route and status code',
      labelNames: ['method', 'route', 'status_code'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
  }

  chargeAnswered(reply: ChargeReply): void {
    if (reply.replayed) {
      this.replaysServed.inc();
      return;
    }
    this.chargesStarted.inc();
    if (!reply.completed) return;
    this.outcomes.inc({ status: reply.charge.status });
    if (reply.charge.status === 'declined') this.declines.inc();
  }

  idempotencyConflict(): void {
    this.idempotencyConflicts.inc();
  }
}

/**
 * Who may read /metrics: a loopback client (a sidecar, `curl` on the host, the container's own
 * healthcheck) always; anyone else only with `Authorization: Bearer <CHARGEGUARD_METRICS_TOKEN>`,
 * compared in constant time as the codec's token is. The metrics name no tenant, but they tell an
 * outsider the service's traffic, its failures and its overdue holds.
 *
 * Refused: without a token configured, 404, the answer for a path that does not exist (there is no
 * way in, so nothing to authenticate against); with one, 401 and WWW-Authenticate, so a scraper
 * with a wrong or missing token is told it is an authentication problem. The source address is
 * the connection's peer (src/http/source-address.ts): behind a proxy on the same host, every caller
 * is loopback, so such a proxy must not forward /metrics (docs/limits.md).
 */
export function metricsAccessHook(token: string | undefined): (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  return async (request, reply) => {
    if (isLoopback(request.ip)) return;
    if (token === undefined) {
      await sendProblem(reply, {
        body: { type: 'not_found', title: 'Not found', status: 404, detail: `no route ${request.method} ${request.url}` },
        headers: {},
      });
      return;
    }
    if (!secretTokenMatches(token, bearerToken(request.headers.authorization))) {
      throw new UnauthorizedError(
        'metrics are served to loopback clients, and to others with the operator\'s metrics token: "Authorization: Bearer <CHARGEGUARD_METRICS_TOKEN>"',
      );
    }
  };
}
