import { spawn } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import { Connection } from '@temporalio/client';
import { hasExited, killOnParentExit, terminate } from '../../src/support/child-process.js';
import { findFreePorts } from '../../src/support/free-port.js';
import { LogSink } from '../../src/support/log-sink.js';
import { resolveTemporalCliPath } from '../../src/stack/temporal-cli.js';
import { chargeSearchAttributes } from '../../src/worker/search-attributes-check.js';
import { pollUntil } from '../../src/support/wait.js';

export interface BenchTemporalOptions {
  dbFilePath: string;
  /** `--sqlite-pragma NAME=VALUE` pairs; empty runs the dev server as `chargeguard start` does. */
  sqlitePragmas: readonly string[];
  logFilePath: string;
  startTimeoutMs?: number;
}

export interface BenchTemporal {
  address: string;
  /** The server's Prometheus endpoint: how the bench counts workflow tasks without trusting the client. */
  metricsUrl: string;
  pid: number;
  stop(): Promise<void>;
}

const host = '127.0.0.1';

/**
 * A Temporal dev server of the bench's own. src/stack starts the same binary the same way, but has
 * no knob for `--sqlite-pragma` or a known metrics port, both of which the bench varies or reads.
 * Headless: the Web UI would only take CPU from the measurement.
 */
export async function startBenchTemporal(options: BenchTemporalOptions): Promise<BenchTemporal> {
  await mkdir(dirname(options.dbFilePath), { recursive: true });
  const [port, metricsPort, httpPort] = await findFreePorts(3, host);
  const args = [
    'server', 'start-dev', '--db-filename', options.dbFilePath, '--ip', host, '--port', String(port),
    '--metrics-port', String(metricsPort), '--http-port', String(httpPort), '--headless', '--log-level', 'error',
    ...options.sqlitePragmas.flatMap((pragma) => ['--sqlite-pragma', pragma]),
    // The charge worker refuses a namespace without them; the dev server applies them as it creates
    // the namespace, which it does on every bench start (a new SQLite file each time).
    ...Object.entries(chargeSearchAttributes).flatMap(([name, kind]) => ['--search-attribute', `${name}=${kind}`]),
  ];
  const sink = new LogSink(options.logFilePath);
  sink.note(`starting temporal ${args.join(' ')}`);
  const child = spawn(resolveTemporalCliPath(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.on('data', (chunk: Buffer) => sink.write(chunk));
  child.stderr?.on('data', (chunk: Buffer) => sink.write(chunk));
  const removeExitHook = killOnParentExit(child);
  const address = `${host}:${port!}`;
  const stop = async (): Promise<void> => {
    await terminate(child, { signal: 'SIGTERM', graceMs: 10_000 });
    removeExitHook();
    await sink.close();
  };

  const deadlineMs = Date.now() + (options.startTimeoutMs ?? 60_000);
  const ready = await pollUntil(
    async () => {
      const connection = await Connection.connect({ address, connectTimeout: 2_000 });
      try {
        await connection.withDeadline(Date.now() + 2_000, () => connection.workflowService.describeNamespace({ namespace: 'default' }));
        return true;
      } finally {
        await connection.close();
      }
    },
    { deadlineMs, intervalMs: 200, shouldAbort: () => hasExited(child) },
  );
  if (!ready.ok || child.pid === undefined) {
    await stop().catch((error: unknown) => process.stderr.write(`stopping the bench Temporal server that never became ready failed: ${(error as Error).message}\n`));
    throw new Error(`bench Temporal server did not become ready: ${String(ready.lastError)}\n${sink.tail()}`);
  }
  return { address, metricsUrl: `http://${host}:${metricsPort!}/metrics`, pid: child.pid, stop };
}
