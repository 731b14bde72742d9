import type { Command } from 'commander';
import { waitForShutdownSignal } from '../shutdown.js';
import { openCliContext, runCommand } from './surface.js';

export function registerApiCommand(program: Command): void {
  program
    .command('api')
    .description('serve the HTTP API (and MCP at /mcp) against TEMPORAL_ADDRESS and DATABASE_URL; stateless, run as many as you like')
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--port <port>', 'port to listen on', '8080')
    .option('--log-level <level>', 'pino log level (info, warn, error, silent)', 'info')
    .action((options: { host: string; port: string; logLevel: string }) =>
      runCommand({}, async () => {
        // Loaded here, not at the top: other commands should not pay for fastify at start-up.
        const { serveApi } = await import('../../api/server.js');
        const context = await openCliContext();
        const api = await serveApi(context, { host: options.host, port: Number(options.port), logger: { level: options.logLevel } });
        process.stderr.write(`API listening on ${api.url} (OpenAPI ${api.url}/openapi.json, docs ${api.url}/docs, MCP ${api.url}/mcp)\n`);
        await waitForShutdownSignal();
        await api.close();
        await context.close();
      }),
    );
}
