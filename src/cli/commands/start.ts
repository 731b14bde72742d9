import type { Command } from 'commander';
import { loadConfig } from '../../config.js';
import { startLocalRuntime } from '../../runtime/local-runtime.js';
import { installProcessSafetyNet, keepExitStatus } from '../../runtime/process-safety.js';
import { waitForStopReason } from '../shutdown.js';

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
      const safety = installProcessSafetyNet({ command: 'start' });
      const config = loadConfig();
      // Cleans up after itself if it fails part-way.
      const runtime = await startLocalRuntime(config, { temporalUiPort: Number(options.uiPort) });
      let failure: unknown = undefined;
      try {
        // Loaded only here: the other commands need not pay for the HTTP framework's import.
        const { serveApi } = await import('../../api/server.js');
        const api = await serveApi(runtime.context, { host: options.host, port: Number(options.port) });
        try {
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
          const stop = await waitForStopReason(safety, { 'the worker': runtime.workerRun });
          failure = stop.error;
          process.stderr.write(`stopping (${stop.reason})…\n`);
        } finally {
          await api.close().catch((error: unknown) => process.stderr.write(`cleanup: closing the API failed: ${(error as Error).message}\n`));
        }
      } finally {
        // Whatever ended the command (Ctrl-C, a dead worker, a failed API start): the worker, the
        // embedded Temporal and PostgreSQL are stopped before the process exits.
        await runtime.stop();
      }
      // An uncaught exception already set exit status 70; a worker that died is an ordinary failure.
      if (failure !== undefined && process.exitCode === undefined) {
        keepExitStatus(1);
        throw failure;
      }
    });
}
