import { spawn } from 'node:child_process';
import { getPriority } from 'node:os';
import { describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { testPayloadSettings, waitFor } from './support/harness.js';
import { nicenessOfEveryThread } from './support/thread-niceness.js';

/** `chargeguard worker` in a child process with `env` added; resolves once it polls, with its threads' niceness then. */
async function workerThreadsOncePolling(env: Record<string, string>): Promise<{ niceness: number[]; output: string }> {
  const stack = inject('stack');
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'worker'], {
    env: { ...process.env, TEMPORAL_ADDRESS: stack.temporalAddress, DATABASE_URL: stack.databaseUrl, ...testPayloadSettings(), ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  let niceness: number[];
  try {
    await waitFor(
      async () => {
        if (child.exitCode !== null) throw new Error(`the worker exited (${child.exitCode}):\n${stderr}`);
        return stderr.includes('worker polling task queue "charges"');
      },
      { timeoutMs: 120_000, intervalMs: 100, what: `the worker polling; output so far:\n${stderr}` },
    );
    // Read while it runs: by now Temporal's runtime, the connection, the worker and the webhook deliverer are up.
    niceness = nicenessOfEveryThread(child.pid!);
  } finally {
    if (child.exitCode === null) child.kill('SIGTERM');
  }
  expect(await exited).toBe(0);
  return { niceness, output: stderr };
}

describe('CHARGEGUARD_WORKER_NICENESS', () => {
  it('a worker runs every thread at the configured niceness, the ones started after it was set too', { timeout: 180_000 }, async () => {
    const parent = getPriority(0);
    const niceness = Math.max(7, parent + 1);
    const { niceness: threads, output } = await workerThreadsOncePolling({ CHARGEGUARD_WORKER_NICENESS: String(niceness) });
    // Node's own threads, V8's, libuv's pool and Temporal's native runtime: many, all at the setting.
    expect(threads.length).toBeGreaterThan(5);
    expect(new Set(threads)).toEqual(new Set([niceness]));
    expect(output).toMatch(new RegExp(`worker niceness ${niceness} \\(CHARGEGUARD_WORKER_NICENESS\\) on \\d+ threads`));
  });

  it('0 leaves every thread at the niceness of the process that started the worker', { timeout: 180_000 }, async () => {
    // The thread that spawns the child is this one: the child's threads start from its niceness.
    const parent = getPriority(0);
    const { niceness: threads, output } = await workerThreadsOncePolling({ CHARGEGUARD_WORKER_NICENESS: '0' });
    expect(threads.length).toBeGreaterThan(5);
    expect(new Set(threads)).toEqual(new Set([parent]));
    expect(output).toContain(`worker niceness left as it is (${parent}): CHARGEGUARD_WORKER_NICENESS=0`);
  });

  it('is a whole number from 0 to 19, 5 unless set; anything else is refused naming the setting', () => {
    expect(loadConfig({}).CHARGEGUARD_WORKER_NICENESS).toBe(5);
    expect(loadConfig({ CHARGEGUARD_WORKER_NICENESS: '0' }).CHARGEGUARD_WORKER_NICENESS).toBe(0);
    expect(loadConfig({ CHARGEGUARD_WORKER_NICENESS: '19' }).CHARGEGUARD_WORKER_NICENESS).toBe(19);
    for (const bad of ['20', '-1', '2.5', 'low']) {
      expect(() => loadConfig({ CHARGEGUARD_WORKER_NICENESS: bad }), bad).toThrow(/invalid configuration: CHARGEGUARD_WORKER_NICENESS: /);
    }
  });
});

describe('CHARGEGUARD_EMBEDDED_SERVER_NICENESS', () => {
  it('is a whole number from 0 to 19, 5 unless set; anything else is refused naming the setting', () => {
    expect(loadConfig({}).CHARGEGUARD_EMBEDDED_SERVER_NICENESS).toBe(5);
    expect(loadConfig({ CHARGEGUARD_EMBEDDED_SERVER_NICENESS: '0' }).CHARGEGUARD_EMBEDDED_SERVER_NICENESS).toBe(0);
    expect(loadConfig({ CHARGEGUARD_EMBEDDED_SERVER_NICENESS: '19' }).CHARGEGUARD_EMBEDDED_SERVER_NICENESS).toBe(19);
    for (const bad of ['20', '-1', '2.5', 'low']) {
      expect(() => loadConfig({ CHARGEGUARD_EMBEDDED_SERVER_NICENESS: bad }), bad).toThrow(/invalid configuration: CHARGEGUARD_EMBEDDED_SERVER_NICENESS: /);
    }
  });
});
