import type { Command } from 'commander';
import { loadConfig } from '../../config.js';
import { startLocalRuntime } from '../../runtime/local-runtime.js';
import { waitForShutdownSignal } from '../shutdown.js';

export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description(
      'the main job: start the local stack (Temporal dev server + PostgreSQL, or the servers the environment names), a worker and the HTTP API',
    )
    .option('--ui-port <port>', 'Temporal Web UI port', '8233')
    .option('--host <host>', 'HTTP API host', '127.0.0.1')
    .option('--port <port>', 'HTTP API port', '3000')
    .action(async (options: { uiPort: string; host: string; port: string }) => {
      const config = loadConfig();
      const runtime = await startLocalRuntime(config, { temporalUiPort: Number(options.uiPort) });
      // Loaded only here: the other commands need not pay for the HTTP framework's import.
      const { serveApi } = await import('../../api/server.js');
      const api = await serveApi(runtime.context, { host: options.host, port: Number(options.port) });
      const lines = [
        'chargeguard is running',
        `  HTTP API:        ${api.url}  (OpenAPI ${api.url}/openapi.json, docs ${api.url}/docs)`,
        `  Temporal Web UI: ${runtime.stack.temporalUiUrl ?? '(external Temporal: use its own UI)'}`,
        `  worker:          task queue "charges"`,
        '',
        'Other terminals reach the same servers with:',
        `  export TEMPORAL_ADDRESS=${runtime.stack.temporalAddress}`,
        `  export DATABASE_URL=${runtime.stack.databaseUrl}`,
        'Ctrl-C stops everything.',
      ];
      process.stdout.write(`${lines.join('\n')}\n`);
      await Promise.race([waitForShutdownSignal(), runtime.workerRun]);
      process.stderr.write('stopping…\n');
      await api.close();
      await runtime.stop();
    });
}
