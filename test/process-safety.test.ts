import { execFile } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { runAll } from '../src/runtime/local-runtime.js';
import { installProcessSafetyNet, uncaughtExceptionExitCode } from '../src/runtime/process-safety.js';
import { waitForStopReason } from '../src/cli/shutdown.js';
import { chargeBody, fundedTenant, newKey, useHarness } from './support/harness.js';

const h = useHarness();

function runFixture(mode: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', 'test/fixtures/process-safety-child.ts', mode],
      { timeout: 60_000 },
      (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : -1) : 0, stdout, stderr }),
    );
  });
}

describe('process-level policy of the long-running commands', () => {
  it('an unhandled rejection is logged loudly, with what was rejected, and the process keeps serving', { timeout: 90_000 }, async () => {
    const run = await runFixture('rejection');
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain('served to the end');
    expect(run.stderr).toMatch(/UNHANDLED PROMISE REJECTION #1 \(a bug; still serving\): Error: a promise nobody awaited/);
  });

  it('an uncaught exception is logged, the cleanup runs, and the process exits with 70', { timeout: 90_000 }, async () => {
    const run = await runFixture('exception');
    expect(run.code).toBe(uncaughtExceptionExitCode);
    expect(run.stdout).toContain('cleanup ran');
    expect(run.stdout).not.toContain('served to the end');
    expect(run.stderr).toMatch(/UNCAUGHT EXCEPTION \(uncaughtException\); cleaning up and exiting with 70: Error: a synchronous throw out of a callback/);
  });

  it('a worker that dies is a reason to stop, not a rejection that skips the cleanup; every cleanup step runs', async () => {
    const safety = installProcessSafetyNet({ command: 'test', log: () => {} });
    try {
      const died = Promise.reject(new Error('worker crashed'));
      const stop = await waitForStopReason(safety, { 'the worker': died });
      expect(stop.reason).toBe('the worker failed: worker crashed');
      expect((stop.error as Error).message).toBe('worker crashed');
    } finally {
      safety.uninstall();
    }
    const ran: string[] = [];
    const cleanup = runAll(
      [
        ['stop the worker', async () => ran.push('worker')],
        ['close the pool', async () => { ran.push('pool'); throw new Error('pool already closed'); }],
        ['stop Temporal and PostgreSQL', async () => ran.push('servers')],
      ],
      () => {},
    );
    await expect(cleanup).rejects.toThrow(/1 cleanup step\(s\) failed/);
    expect(ran).toEqual(['worker', 'pool', 'servers']);
  });
});

describe('a re-sent manual-capture charge whose workflow was terminated', () => {
  it('answers without leaving a rejected promise unhandled (it used to stop the process)', async () => {
    const tenant = await fundedTenant(h, { label: 'terminated', payerMinor: 2_000 });
    const key = newKey('manual');
    const body = chargeBody({ amount: 500, capture: 'manual' });
    const first = await h.client.charge(tenant, key, body);
    expect(first.charge.status).toBe('reserved');
    const handle = h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key));
    await handle.terminate('test: a workflow killed by an operator');

    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      // The crash was a race (the workflow's failure arriving while the ledger was being read), so
      // the re-send is repeated; each answer is the ledger's or a typed error, never a crash.
      for (let attempt = 0; attempt < 10; attempt++) {
        const answer = await h.client.charge(tenant, key, body).then(
          (reply) => reply.charge.status,
          (error: unknown) => (error as Error).constructor.name,
        );
        expect(typeof answer).toBe('string');
      }
      // One more round trip to Temporal, so a late rejection has had its turn to surface.
      await handle.describe();
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
