import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { hasExited, killOnParentExit, terminate, waitForExit } from '../src/stack/child-process.js';
import { repoRoot } from '../src/stack/repo-root.js';
import { pollUntil } from '../src/stack/wait.js';
import { bundleChargeWorkflows, compiledLayout } from '../src/worker/charge-worker.js';

/**
 * Compiles the service with its workflow bundle, as `npm run build` does for a deployment, into
 * `outDir`, and returns the CLI's entry. The build resolves the repository's packages.
 */
export async function buildCli(outDir: string): Promise<string> {
  const { buildDist } = await import('../build/build.js');
  await buildDist({ outDir, workflowBundle: false });
  // A folder outside the repository still resolves the repository's packages, as ESM; the
  // workflows are bundled from the build once they can (as the build itself does in the repository).
  await writeFile(join(outDir, 'package.json'), '{ "type": "module" }\n');
  await symlink(join(repoRoot(), 'node_modules'), join(outDir, 'node_modules'), 'dir');
  const { code } = await bundleChargeWorkflows(join(outDir, compiledLayout.workflowsIndex));
  await writeFile(join(outDir, compiledLayout.workflowBundle), code);
  return join(outDir, 'src', 'cli', 'main.js');
}

/** A chargeguard command (`worker`, `api`) as its own OS process: what the chaos run kills and starts again. */
export interface AppProcess {
  name: string;
  start(): Promise<void>;
  /** SIGKILL: no drain, no cleanup; Temporal retries whatever it was running on another worker. */
  kill(): Promise<void>;
  stop(): Promise<void>;
  readonly running: boolean;
  /** Running and past its ready line. */
  readonly ready: boolean;
}

export interface AppProcessOptions {
  name: string;
  /** The compiled CLI (what a deployment runs), so a restart costs what it costs in production. */
  cliEntry: string;
  args: string[];
  env: Record<string, string>;
  /** A line on stderr that says the process is ready. */
  readyLine: RegExp;
  logDir: string;
  readyTimeoutMs: number;
}

const stopGraceMs = 10_000;

export function appProcess(options: AppProcessOptions): AppProcess {
  let child: ChildProcess | null = null;
  let ready = false;
  let unhook: () => void = () => undefined;
  let log: WriteStream | null = null;
  return {
    name: options.name,
    get running() {
      return child !== null && !hasExited(child);
    },
    get ready() {
      return ready && child !== null && !hasExited(child);
    },
    start: async () => {
      log ??= createWriteStream(join(options.logDir, `${options.name}.log`), { flags: 'a' });
      let output = '';
      const started = spawn(process.execPath, [options.cliEntry, ...options.args], {
        cwd: repoRoot(),
        env: { ...process.env, ...options.env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child = started;
      unhook = killOnParentExit(started, 'SIGKILL');
      const sink = log;
      const collect = (chunk: Buffer): void => {
        sink.write(chunk);
        if (output.length < 64 * 1024) output += chunk.toString();
      };
      started.stdout!.on('data', collect);
      started.stderr!.on('data', collect);
      ready = false;
      const readiness = await pollUntil(async () => options.readyLine.test(output), {
        deadlineMs: Date.now() + options.readyTimeoutMs,
        intervalMs: 50,
        shouldAbort: () => hasExited(started),
      });
      if (!readiness.ok) {
        const why = hasExited(started) ? `exited (${started.signalCode ?? `code ${started.exitCode}`}) before it was ready` : `was not ready within ${options.readyTimeoutMs} ms`;
        throw new Error(`${options.name} ${why}; its output:\n${output.slice(-4000)}`);
      }
      ready = true;
    },
    kill: async () => {
      ready = false;
      if (child === null || hasExited(child)) return;
      child.kill('SIGKILL');
      await waitForExit(child, stopGraceMs);
      unhook();
    },
    stop: async () => {
      if (child !== null && !hasExited(child)) await terminate(child, { signal: 'SIGTERM', graceMs: stopGraceMs });
      unhook();
      log?.end();
      log = null;
    },
  };
}
