import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import type { AppContext } from '../runtime/app-context.js';
import type { Principal } from '../auth/principal.js';
import { createMcpServer, type McpDeps } from './server.js';

/**
 * Serves the tools over stdin/stdout for one principal until stdin closes. `principal` is asked on
 * every tool call (with an API key it looks the key up again, so a revoked key stops working on
 * its next call). Stdout belongs to the protocol: anything human goes to stderr.
 */
export async function serveMcpOverStdio(
  context: AppContext,
  principal: () => Promise<Principal>,
  beforeOperation?: McpDeps['beforeOperation'],
): Promise<void> {
  const server = createMcpServer({
    ...(beforeOperation ? { beforeOperation } : {}),
    charges: context.charges,
    accounts: context.accounts,
    webhookEndpoints: context.webhookEndpoints,
    principal,
    waitBudgetMs: context.config.CHARGE_WAIT_BUDGET_MS,
  });
  const transport = new StdioServerTransport();
  const closed = new Promise<void>((resolve) => {
    transport.onclose = () => resolve();
    process.stdin.once('end', () => resolve());
  });
  await server.connect(transport);
  await closed;
  await server.close();
}
