import type { FastifyInstance } from 'fastify';
import { buildApi, type ApiOptions } from '../api/app.js';
import type { ApiRoutes } from '../api/deps.js';
import { serveApi, type RunningApi } from '../api/server.js';
import { registerCodecRoutesFromConfig } from '../codec/codec-routes.js';
import { mcpRoutes } from '../mcp/http.js';
import type { AppContext } from '../runtime/app-context.js';

/**
 * The HTTP app that `start`, `api` and `mcp --http` serve: the API with the MCP endpoint (/mcp) and
 * the codec endpoint (/codec, when CHARGEGUARD_CODEC_TOKEN is set). Put together here, above all
 * three, so the API module imports neither the MCP nor the codec module.
 */

/** Temporal's remote codec protocol for the Web UI, with the operator's token (docs/back-door.md). */
export const codecRoutes: ApiRoutes = {
  name: 'codec',
  scope: 'public',
  register: (app, deps) => registerCodecRoutesFromConfig(app, deps.context.config),
};

export interface HttpAppOptions {
  /** Serve the MCP streamable HTTP endpoint at /mcp (on by default). */
  mcp?: boolean;
}

export function surfaceRoutes(options: HttpAppOptions = {}): ApiRoutes[] {
  return [codecRoutes, ...(options.mcp ?? true ? [mcpRoutes] : [])];
}

/** The app, not yet listening (tests listen on port 0). */
export function buildHttpApp(options: ApiOptions & HttpAppOptions): Promise<FastifyInstance> {
  const { mcp, ...apiOptions } = options;
  return buildApi({ ...apiOptions, extraRoutes: [...(apiOptions.extraRoutes ?? []), ...surfaceRoutes({ mcp })] });
}

/** Builds the app and listens. */
export function serveHttpApp(
  context: AppContext,
  options: Parameters<typeof serveApi>[1] & HttpAppOptions = {},
): Promise<RunningApi> {
  const { mcp, ...apiOptions } = options;
  return serveApi(context, { ...apiOptions, extraRoutes: [...(apiOptions.extraRoutes ?? []), ...surfaceRoutes({ mcp })] });
}
