/**
 * The bench's worker process: the charge worker (and the baseline worker) with the tuning the
 * parent sends, until the parent says stop. Started by startWorkersInChild, compiled (never under
 * tsx) and with a deployed worker's Node flags.
 */
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { startWorkersInProcess, type BenchWorkersConfig, type WorkerProcessMessage } from './workers.js';

Runtime.install({ logger: new DefaultLogger('WARN') });

function send(message: WorkerProcessMessage): void {
  process.send?.(message);
}

try {
  const config = JSON.parse(process.env.BENCH_WORKERS_CONFIG ?? '') as BenchWorkersConfig;
  const workers = await startWorkersInProcess(config);
  process.on('message', (message: { type?: string }) => {
    if (message.type === 'memory') send({ type: 'memory', usage: process.memoryUsage() });
    if (message.type !== 'stop') return;
    void workers.stop().finally(() => {
      send({ type: 'stopped' });
      process.disconnect?.();
    });
  });
  // Orphaned (the bench died): stop rather than poll forever.
  process.on('disconnect', () => void workers.stop().finally(() => process.exit(0)));
  send({ type: 'ready' });
} catch (error) {
  send({ type: 'failed', message: (error as Error).message });
  process.exitCode = 1;
}
