import type { FastifyInstance } from 'fastify';
import type { AppContext } from '../runtime/app-context.js';
import { buildApi, type ApiOptions } from './app.js';

export interface RunningApi {
  app: FastifyInstance;
  /** Where it listens, e.g. http://127.0.0.1:8080 */
  url: string;
  close(): Promise<void>;
}

export const defaultApiPort = 8080;

/**
 * How often a served API deletes the source address and provider buckets that have refilled to
 * full (docs/limits.md): addresses come and go, and a full bucket is what a missing row means. Every
 * replica does it; the statement is idempotent, and cheap on a table that keeps only recent addresses.
 */
export const addressBucketSweepIntervalMs = 60_000;

/**
 * What `start` and `mcp --http` log with: info, for the listening line; with per-request lines off
 * the rest is the 5xx lines (warn for a 503, error for a 500), each with its request id.
 */
export const defaultServeLogger = { level: 'info' } as const;

/** Builds the API and listens: what the `api` and `start` commands run. */
export async function serveApi(
  context: AppContext,
  options: Omit<ApiOptions, 'context'> & { host?: string; port?: number } = {},
): Promise<RunningApi> {
  const { host = '127.0.0.1', port = defaultApiPort, ...apiOptions } = options;
  // A served API always logs (its 5xx lines at least); a line per request only when the caller asks for a logger.
  const logged = apiOptions.logger === undefined ? { logger: defaultServeLogger, logRequests: apiOptions.logRequests ?? false } : {};
  const app = await buildApi({ ...apiOptions, ...logged, context });
  const sweeper = setInterval(() => {
    context.limits.deleteFullAddressBuckets().catch((error: unknown) =>
      app.log.warn({ err: error }, 'could not delete the idle address rate limit buckets; the next sweep retries'),
    );
  }, addressBucketSweepIntervalMs);
  sweeper.unref();
  app.addHook('onClose', async () => clearInterval(sweeper));
  await app.listen({ host, port });
  const address = app.server.address();
  const boundPort = address !== null && typeof address === 'object' ? address.port : port;
  return { app, url: `http://${host.includes(':') ? `[${host}]` : host}:${boundPort}`, close: () => app.close() };
}
