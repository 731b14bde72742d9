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

/** Builds the API and listens: what the `api` and `start` commands run. */
export async function serveApi(
  context: AppContext,
  options: Omit<ApiOptions, 'context'> & { host?: string; port?: number } = {},
): Promise<RunningApi> {
  const { host = '127.0.0.1', port = defaultApiPort, ...apiOptions } = options;
  const app = await buildApi({ ...apiOptions, context });
  await app.listen({ host, port });
  const address = app.server.address();
  const boundPort = address !== null && typeof address === 'object' ? address.port : port;
  return { app, url: `http://${host.includes(':') ? `[${host}]` : host}:${boundPort}`, close: () => app.close() };
}
