import type { FastifyInstance } from 'fastify';
import type { ApiDeps } from '../deps.js';
import { metricsAccessHook } from '../metrics.js';
import { healthRateLimitHook } from '../../http/rate-limit-hook.js';
import { refuseOtherMethods } from './method-not-allowed.js';

/** Short: a readiness probe that hangs is worse than one that says "not ready". */
const readinessTimeoutMs = 2_000;

async function check(probe: () => Promise<unknown>): Promise<'ok' | string> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      probe(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${readinessTimeoutMs} ms`)), readinessTimeoutMs);
      }),
    ]);
    return 'ok';
  } catch (error) {
    return (error as Error).message || 'unreachable';
  } finally {
    clearTimeout(timer);
  }
}

export function registerHealthRoutes(app: FastifyInstance, deps: ApiDeps): void {
  const { context, metrics } = deps;
  const open = { security: [], tags: ['operations'] };
  for (const url of ['/healthz', '/readyz', '/metrics']) refuseOtherMethods(app, url, ['GET']);

  // Per source address, generously (docs/limits.md); served anyway when the limiter cannot answer.
  const metered = healthRateLimitHook(context);

  app.get('/healthz', { onRequest: metered, schema: { ...open, summary: 'The process is alive' } }, async () => ({ status: 'ok' }));

  app.get(
    '/readyz',
    { onRequest: metered, schema: { ...open, summary: 'Temporal and PostgreSQL are reachable (503 otherwise)' } },
    async (_request, reply) => {
      const [temporal, database] = await Promise.all([
        check(() =>
          context.temporal.withDeadline(Date.now() + readinessTimeoutMs, () =>
            context.temporal.workflowService.getSystemInfo({}),
          ),
        ),
        check(() => context.readings.ping()),
      ]);
      const ready = temporal === 'ok' && database === 'ok';
      if (!ready) reply.header('retry-after', String(deps.retryAfterSeconds));
      return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'unavailable', checks: { temporal, database } });
    },
  );

  app.get(
    '/metrics',
    {
      onRequest: metricsAccessHook(context.config.CHARGEGUARD_METRICS_TOKEN),
      schema: {
        ...open,
        summary: 'Prometheus metrics: to loopback clients, and to others with the operator\'s metrics token (CHARGEGUARD_METRICS_TOKEN)',
      },
    },
    async (_request, reply) => {
      reply.type(metrics.registry.contentType);
      return metrics.registry.metrics();
    },
  );
}
