import { buildApi } from '../../src/api/app.js';
import { loadConfig } from '../../src/config.js';
import { mcpRoutes } from '../../src/mcp/http.js';
import type { AppContext } from '../../src/runtime/app-context.js';

/**
 * The OpenAPI document the app serves at /openapi.json, built without Temporal or PostgreSQL: the
 * app is assembled (as `start` assembles it, with the MCP endpoint) around a context whose services
 * refuse every use, and never listens. Building registers routes and schemas only; nothing in it
 * calls the ledger or Temporal, and if it ever did this throws naming what it reached for.
 * Defaults of the configuration apply (CHARGE_AMOUNT_MINOR_MAX), as in a test app.
 */
export async function offlineOpenApiDocument(): Promise<Record<string, unknown>> {
  const offline = (what: string): never =>
    new Proxy({}, {
      get: (_target, property) => {
        // Not a thenable: awaiting it must not reach for a service.
        if (property === 'then') return undefined;
        throw new Error(`building the OpenAPI document reached for ${what}.${String(property)}: it must not need the servers`);
      },
    }) as never;
  const context: AppContext = {
    config: loadConfig({}),
    endpoints: offline('endpoints'),
    temporal: offline('temporal'),
    charges: offline('charges'),
    accounts: offline('accounts'),
    tokens: offline('tokens'),
    keys: offline('keys'),
    limits: offline('limits'),
    webhooks: offline('webhooks'),
    // Made when the provider events route is registered; used only when a delivery arrives.
    providerEvents: () => offline('providerEvents'),
    readings: offline('readings'),
    reconciliation: offline('reconciliation'),
    eventStream: offline('eventStream'),
    webhookEndpoints: offline('webhookEndpoints'),
    close: async () => undefined,
  };
  const app = await buildApi({ context, extraRoutes: [mcpRoutes] });
  try {
    await app.ready();
    return app.swagger() as unknown as Record<string, unknown>;
  } finally {
    await app.close();
  }
}
