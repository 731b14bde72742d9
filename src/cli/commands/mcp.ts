import type { Command } from 'commander';
import { tenantForApiKey } from '../../auth/api-keys.js';
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
            const { serveApi } = await import('../../api/server.js');
            const api = await serveApi(context, { host: options.host, port: Number(options.port) });
            process.stderr.write(`MCP (streamable HTTP) on ${api.url}/mcp: send "Authorization: Bearer <API key>"\n`);
            try {
              const stop = await waitForStopReason(safety);
              process.stderr.write(`stopping (${stop.reason})…\n`);
            } finally {
              await api.close();
            }
            return;
          }
          const tenant = await stdioTenant(options, context.ledger);
          process.stderr.write(`chargeguard MCP server on stdio for tenant ${tenant}\n`);
          const { serveMcpOverStdio } = await import('../../mcp/stdio.js');
          // Until stdin closes, or an uncaught exception means the process must stop.
          await Promise.race([serveMcpOverStdio(context, tenant), safety.fatal]);
        } finally {
          await context.close();
        }
      }),
    );
}

/** On stdio the process is already trusted with the database; the key only says which tenant. */
async function stdioTenant(options: McpOptions, ledger: Parameters<typeof tenantForApiKey>[0]): Promise<string> {
  if (options.tenant) return options.tenant;
  const apiKey = process.env.CHARGEGUARD_API_KEY;
  if (apiKey) {
    const tenant = await tenantForApiKey(ledger, apiKey);
    if (tenant === null) throw new UsageError('CHARGEGUARD_API_KEY is unknown or revoked');
    return tenant;
  }
  if (process.env.CHARGEGUARD_TENANT) return process.env.CHARGEGUARD_TENANT;
  throw new UsageError('say which tenant: --tenant, CHARGEGUARD_API_KEY or CHARGEGUARD_TENANT');
}
