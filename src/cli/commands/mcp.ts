import type { Command } from 'commander';
import { principalForApiKey } from '../../auth/api-keys.js';
import type { Principal } from '../../auth/principal.js';
import { UnauthorizedError } from '../../service/errors.js';
import { loadConfig } from '../../config.js';
import { openServiceContext } from '../../runtime/app-context.js';
import { installProcessSafetyNet } from '../../runtime/process-safety.js';
import { waitForStopReason } from '../shutdown.js';
import { runCommand, UsageError } from './surface.js';

interface McpOptions {
  http?: boolean;
  stdio?: boolean;
  tenant?: string;
  host: string;
  port: string;
}

export function registerMcpCommand(program: Command): void {
  program
    .command('mcp')
    .description('serve the MCP tools: over stdio for one tenant (default), or over streamable HTTP with per-tenant API keys')
    .option('--stdio', 'stdio transport (the default): the tenant is $CHARGEGUARD_API_KEY\'s, or --tenant')
    .option('--http', 'streamable HTTP at /mcp (with the rest of the API), authenticated by API keys')
    .option('--tenant <id>', 'stdio only: act for this tenant (default: the tenant of $CHARGEGUARD_API_KEY, or $CHARGEGUARD_TENANT)')
    .option('--host <host>', 'HTTP only: address to listen on', '127.0.0.1')
    .option('--port <port>', 'HTTP only: port to listen on', '8080')
    .action((options: McpOptions) =>
      runCommand({}, async () => {
        if (options.http && options.stdio) throw new UsageError('choose one of --stdio and --http');
        const safety = installProcessSafetyNet({ command: 'mcp' });
        // stderr: on stdio, stdout carries the protocol.
        const context = await openServiceContext(loadConfig(), (line) => process.stderr.write(`${line}\n`));
        try {
          if (options.http) {
            // Loaded here, not at the top: other commands should not pay for fastify at start-up.
            const { serveHttpApp } = await import('../http-app.js');
            const api = await serveHttpApp(context, { host: options.host, port: Number(options.port) });
            process.stderr.write(`MCP (streamable HTTP) on ${api.url}/mcp: send "Authorization: Bearer <API key>"\n`);
            try {
              const stop = await waitForStopReason(safety);
              process.stderr.write(`stopping (${stop.reason})…\n`);
            } finally {
              await api.close();
            }
            return;
          }
          const { first, principal } = await stdioPrincipal(options, context.ledger);
          process.stderr.write(
            `chargeguard MCP server on stdio for tenant ${first.tenant} as ${first.keyId === null ? 'the operator (no key), role' : `key ${first.keyId},`} ${first.role}\n`,
          );
          const { serveMcpOverStdio } = await import('../../mcp/stdio.js');
          // Until stdin closes, or an uncaught exception means the process must stop.
          await Promise.race([serveMcpOverStdio(context, principal), safety.fatal]);
        } finally {
          await context.close();
        }
      }),
    );
}

/**
 * Who the stdio server acts as. With $CHARGEGUARD_API_KEY: that key, looked up again on every tool
 * call (revoked → refused; its role as it is now). With --tenant or $CHARGEGUARD_TENANT: the
 * operator, who already has database access, names the tenant and the tools act as an agent key
 * would (the MCP tools are an agent's: none of them opens accounts or deposits).
 */
async function stdioPrincipal(
  options: McpOptions,
  ledger: Parameters<typeof principalForApiKey>[0],
): Promise<{ first: Principal; principal: () => Promise<Principal> }> {
  const tenant = options.tenant ?? (process.env.CHARGEGUARD_API_KEY ? undefined : process.env.CHARGEGUARD_TENANT);
  if (tenant !== undefined && tenant !== '') {
    const operator: Principal = { tenant, keyId: null, role: 'agent' };
    return { first: operator, principal: async () => operator };
  }
  const apiKey = process.env.CHARGEGUARD_API_KEY;
  if (!apiKey) throw new UsageError('say which tenant: --tenant, CHARGEGUARD_API_KEY or CHARGEGUARD_TENANT');
  const first = await principalForApiKey(ledger, apiKey);
  if (first === null) throw new UsageError('CHARGEGUARD_API_KEY is unknown, revoked or expired');
  const principal = async (): Promise<Principal> => {
    const now = await principalForApiKey(ledger, apiKey);
    if (now === null) throw new UnauthorizedError('the API key (CHARGEGUARD_API_KEY) is unknown, revoked or expired');
    return now;
  };
  return { first, principal };
}
