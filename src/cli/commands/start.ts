import type { Command } from 'commander';
import { loadConfig } from '../../config.js';
import { startLocalRuntime } from '../../runtime/local-runtime.js';
import { waitForShutdownSignal } from '../shutdown.js';

export function registerStartCommand(program: Command): void {
  program
    .command('start')
    .description('start the local stack (Temporal dev server + PostgreSQL, or the servers the environment names) and a worker')
    .option('--ui-port <port>', 'Temporal Web UI port', '8233')
    .action(async (options: { uiPort: string }) => {
      const config = loadConfig();
      const runtime = await startLocalRuntime(config, { temporalUiPort: Number(options.uiPort) });
      const lines = [
        'chargeguard is running',
        `  Temporal:        ${runtime.stack.temporalAddress}`,
        `  Temporal Web UI: ${runtime.stack.temporalUiUrl ?? '(external Temporal: use its own UI)'}`,
        `  PostgreSQL:      ${redact(runtime.stack.databaseUrl)}`,
        `  worker:          task queue "charges"`,
        'Ctrl-C stops everything.',
      ];
      process.stdout.write(`${lines.join('\n')}\n`);
      await Promise.race([waitForShutdownSignal(), runtime.workerRun]);
      process.stderr.write('stopping…\n');
      await runtime.stop();
    });
}

function redact(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}
