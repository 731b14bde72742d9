import type { Command } from 'commander';
import type { Principal } from '../../auth/principal.js';
import type { Operation } from '../../domain/permissions.js';
import type { McpDeps } from '../../mcp/server.js';
import { apiKeyFrom, apiKeySettings, assertOperatorMayAct, identify, operatorMayMoveMoney, principalOfKey, type KeyLookup } from '../identity.js';
import { loadConfig } from '../../config.js';
import { openServiceContext } from '../../runtime/app-context.js';
import { installProcessSafetyNet } from '../../runtime/process-safety.js';
import { waitForStopReason } from '../shutdown.js';
import { runCommand, UsageError } from './surface.js';

interface McpOptions {
  http?: boolean;
  apiKeyFile?: string;
  stdio?: boolean;
  tenant?: string;
  host: string;
  port: string;
}

export function registerMcpCommand(program: Command): void {
  program
    .command('mcp')
    .description('serve the MCP tools: over stdio for one tenant (default), or over streamable HTTP with per-tenant API keys')
    .option('--stdio', 'stdio transport (the default): acting as $CHARGEGUARD_API_KEY (or --api-key-file), else as the operator for --tenant')
    .option('--http', 'streamable HTTP at /mcp (with the rest of the API), authenticated by API keys')
    .option('--tenant <id>', 'stdio only: act for this tenant (default: the API key\'s, else $CHARGEGUARD_TENANT); with a key, it must be the key\'s')
    .option('--api-key-file <path>', 'stdio only: act as the API key in this file (default: $CHARGEGUARD_API_KEY, else the file $CHARGEGUARD_API_KEY_FILE)')
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
          const { first, principal, beforeOperation } = await stdioPrincipal(options, context.keys);
          process.stderr.write(
            `chargeguard MCP server on stdio for tenant ${first.tenant} as ${first.keyId === null ? 'the operator (no key), role' : `key ${first.keyId},`} ${first.role}\n`,
          );
          if (first.keyId === null && !(await operatorMayMoveMoney(context.keys, first.tenant))) {
            process.stderr.write(
              `tenant ${first.tenant} has API keys: without one, create_charge and refund_charge are refused; start this server with ${apiKeySettings} set to a key of the tenant\n`,
            );
          }
          const { serveMcpOverStdio } = await import('../../mcp/stdio.js');
          // Until stdin closes, or an uncaught exception means the process must stop.
          await Promise.race([serveMcpOverStdio(context, principal, beforeOperation), safety.fatal]);
        } finally {
          await context.close();
        }
      }),
    );
}

/**
 * Who the stdio server acts as (src/cli/identity.ts). With an API key: that key, looked up again
 * on every tool call (revoked → refused; its role and mandate as they are now). Without one: the
 * operator for --tenant or $CHARGEGUARD_TENANT, who already has database access and acts as an
 * agent key would (the MCP tools are an agent's: none of them opens accounts or deposits), where
 * the ledger lets the operator act: create_charge and refund_charge are refused in a tenant that
 * has API keys, naming the setting that would make them work.
 */
async function stdioPrincipal(
  options: McpOptions,
  keys: KeyLookup,
): Promise<{ first: Principal; principal: () => Promise<Principal>; beforeOperation: McpDeps['beforeOperation'] }> {
  const first = await identify(keys, options);
  const key = apiKeyFrom(options);
  const beforeOperation = (principal: Principal, operation: Operation) => assertOperatorMayAct(keys, principal, operation);
  if (key === null) return { first, principal: async () => first, beforeOperation };
  return { first, principal: () => principalOfKey(keys, key), beforeOperation };
}
