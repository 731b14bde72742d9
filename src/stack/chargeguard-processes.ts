import { spawn, type ChildProcess } from 'node:child_process';
import { hasExited, killOnParentExit, terminate } from '../support/child-process.js';
import { LogSink } from '../support/log-sink.js';

/**
 * chargeguard's own stateless processes (`worker`, `api`) run as children, as a deployment runs
 * them: each its own Node process with its own Temporal connection and ledger pool. Used by
 * `start --cluster` and the cluster tests.
 */

/** How to run the CLI again: the node binary and the arguments before the command name. */
export interface CliInvocation {
  command: string;
  args: readonly string[];
}

/**
 * The CLI this process is running, with the same Node flags (under tsx: its loader; from dist:
 * none), so a child runs the same code the parent does.
 */
export function currentCliInvocation(): CliInvocation {
  const entry = process.argv[1];
  if (entry === undefined) throw new Error('cannot tell which script this process runs (process.argv[1] is empty)');
  return { command: process.execPath, args: [...process.execArgv, entry] };
}

export interface ChargeguardProcess {
  /** `worker-1`, `api-2`, …: how logs and messages name it. */
  name: string;
  pid: number;
  /** For an API: the URL it printed it listens on; null for a worker. */
  url: string | null;
  child: ChildProcess;
  /** Resolves when the process exits, with its code or signal. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM (the commands drain and close), SIGKILL after the grace period. */
  stop(): Promise<void>;
}

export interface StartChargeguardProcessOptions {
  name: string;
  cli: CliInvocation;
  /** The command and its options, e.g. ['api', '--port', '3001']. */
  commandArgs: readonly string[];
  /** Added to this process's environment. */
  env: Readonly<Record<string, string>>;
  /** Where the child's stdout and stderr are appended. */
  logFilePath?: string;
  /** The line (on stderr) that says the process is ready; its first capture group, if any, is the URL. */
  readyLine: RegExp;
  startTimeoutMs: number;
  stopTimeoutMs: number;
}

/** Starts one process and resolves once it printed its ready line; fails (and kills it) otherwise. */
export async function startChargeguardProcess(opts: StartChargeguardProcessOptions): Promise<ChargeguardProcess> {
  const sink = new LogSink(opts.logFilePath);
  sink.note(`starting ${opts.name}: ${opts.cli.command} ${[...opts.cli.args, ...opts.commandArgs].join(' ')}`);
  const child = spawn(opts.cli.command, [...opts.cli.args, ...opts.commandArgs], {
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const removeExitHook = killOnParentExit(child);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      sink.note(`${opts.name} exited (code ${code ?? 'null'}, signal ${signal ?? 'null'})`);
      removeExitHook();
      resolve({ code, signal });
    });
  });
  // Output still buffered in the pipes arrives after 'exit'; 'close' comes once they are drained.
  // A stop closes the log itself, after its own last line.
  let stopRequested = false;
  const drained = new Promise<void>((resolve) => child.once('close', () => resolve()));
  let sinkClosed: Promise<void> | null = null;
  const closeSink = (): Promise<void> => (sinkClosed ??= sink.close());
  void drained.then(() => (stopRequested ? undefined : closeSink()));
  child.stdout?.on('data', (chunk: Buffer) => sink.write(chunk));

  let stderrText = '';
  const ready = new Promise<string | null>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${opts.name} did not print its ready line within ${opts.startTimeoutMs} ms`)),
      opts.startTimeoutMs,
    );
    const onData = (chunk: Buffer): void => {
      sink.write(chunk);
      stderrText += chunk.toString('utf8');
      const match = opts.readyLine.exec(stderrText);
      if (match !== null) {
        clearTimeout(timer);
        child.stderr?.off('data', onData);
        child.stderr?.on('data', (rest: Buffer) => sink.write(rest));
        resolve(match[1] ?? null);
      }
    };
    child.stderr?.on('data', onData);
    child.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${opts.name} exited before it was ready (code ${code ?? 'null'}, signal ${signal ?? 'null'})`));
    });
  });

  let url: string | null;
  try {
    url = await ready;
  } catch (error) {
    if (!hasExited(child)) await terminate(child, { signal: 'SIGTERM', graceMs: opts.stopTimeoutMs }).catch(() => undefined);
    const tail = sink.tail();
    throw new Error(
      `${(error as Error).message}` + (opts.logFilePath ? ` (log ${opts.logFilePath})` : '') + (tail ? `\n--- last output of ${opts.name} ---\n${tail}` : ''),
    );
  }
  let stopping: Promise<void> | null = null;
  return {
    name: opts.name,
    pid: child.pid!,
    url,
    child,
    exited,
    stop: () => {
      stopRequested = true;
      stopping ??= terminate(child, { signal: 'SIGTERM', graceMs: opts.stopTimeoutMs }).then(async ({ forced }) => {
        if (forced) sink.note(`${opts.name} ignored SIGTERM for ${opts.stopTimeoutMs} ms and was killed`);
        await exited;
        await drained;
        await closeSink();
      });
      return stopping;
    },
  };
}

/** What `worker` prints once it polls (src/cli/commands/worker.ts). */
export const workerReadyLine = /worker polling task queue/;
/** What `api` prints once it listens (src/cli/commands/api.ts); the URL is captured. */
export const apiReadyLine = /API listening on (http:\/\/\S+)/;
