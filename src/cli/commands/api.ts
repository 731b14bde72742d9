import type { Command } from 'commander';
import { loadConfig } from '../../config.js';
import { openServiceContext } from '../../runtime/app-context.js';
import { installProcessSafetyNet } from '../../runtime/process-safety.js';
import { waitForStopReason } from '../shutdown.js';
import { runCommand } from './surface.js';

export function registerApiCommand(program: Command): void {
  program
    .command('api')
    .description('serve the HTTP API (and MCP at /mcp) against TEMPORAL_ADDRESS and DATABASE_URL; stateless, run as many as you like')
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option('--port <port>', 'port to listen on', '8080')
    .option('--log-level <level>', 'pino log level (info, warn, error, silent)', 'info')
    .action((options: { host: string; port: string; logLevel: string }) =>
      runCommand({}, async () => {
        const safety = installProcessSafetyNet({ command: 'api' });
        // Loaded here, not at the top: other commands should not pay for fastify at start-up.
        const { serveHttpApp } = await import('../http-app.js');
        const context = await openServiceContext(loadConfig(), (line) => process.stderr.write(`${line}\n`));
        try {
          const api = await serveHttpApp(context, { host: options.host, port: Number(options.port), logger: { level: options.logLevel } });
          try {
            process.stderr.write(`API listening on ${api.url} (OpenAPI ${api.url}/openapi.json, docs ${api.url}/docs, MCP ${api.url}/mcp)\n`);
            const stop = await waitForStopReason(safety);
            process.stderr.write(`stopping (${stop.reason})…\n`);
          } finally {
            await api.close();
          }
        } finally {
          await context.close();
        }
      }),
    );
}
