import type { Command } from 'commander';
import { loadConfig } from '../../config.js';
import { defaultDemoOptions, demoHeld, formatDemoTotals } from '../../demo/flaky-agent-demo.js';
import { formatReconcileReport } from '../../reconcile/index.js';
import { runDemoOn } from '../../runtime/demo.js';
import { startLocalRuntime } from '../../runtime/local-runtime.js';

export function registerDemoCommand(program: Command): void {
  program
    .command('demo')
    .description('agents charge orders over a flaky link (lost answers, retries, concurrent duplicates); prints the ledger totals')
    .option('--orders <n>', 'how many orders', String(defaultDemoOptions.orders))
    .option('--agents <n>', 'how many agents run at once', String(defaultDemoOptions.concurrentAgents))
    .option('--json', 'print the totals as JSON')
    .action(async (options: { orders: string; agents: string; json?: boolean }) => {
      const orders = positiveInt(options.orders, '--orders', 100_000);
      const concurrentAgents = positiveInt(options.agents, '--agents', 1_000);
      const runtime = await startLocalRuntime(loadConfig(), { temporalUiPort: null });
      try {
        const { totals, report } = await runDemoOn(runtime, { ...defaultDemoOptions, orders, concurrentAgents });
        process.stdout.write(
          options.json
            ? `${JSON.stringify({ totals, reconcile: report }, null, 2)}\n`
            : `${formatDemoTotals(totals)}\n\n${formatReconcileReport(report)}\n`,
        );
        if (!report.ok) process.exitCode = 1;
        if (!demoHeld(totals)) {
          process.stderr.write('exactly-once did NOT hold: see the totals above\n');
          process.exitCode = 1;
        }
      } finally {
        await runtime.stop();
      }
    });
}

function positiveInt(text: string, flag: string, max: number): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 1 || value > max) throw new Error(`${flag} must be an integer in 1..${max}`);
  return value;
}
