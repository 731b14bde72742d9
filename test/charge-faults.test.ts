import { spawn } from 'node:child_process';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, inject, it } from 'vitest';
import type { LedgerStep } from '../activities/index.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  fundedTenant,
  newKey,
  startTestWorker,
  useHarness,
  waitFor,
} from './support/harness.js';

const h = useHarness();

describe('faults between the ledger and Temporal', () => {
  it('Confirm refused non-retryably: the workflow compensates, the hold is released, the charge is CANCELLED', async () => {
    const taskQueue = `faults-${newKey('confirm-refused')}`;
    const worker = await startTestWorker({
      taskQueue,
      pool: h.pool,
      hooks: {
        beforeStep(step) {
          if (step === 'confirm') throw ApplicationFailure.nonRetryable('payment network refused the capture', 'CaptureRefused');
        },
      },
    });
    try {
      const tenant = await fundedTenant(h, { label: 'comp' });
      const key = newKey();
      const reply = await h.clientFor({ taskQueue }).charge(tenant, key, chargeBody({ amount: 4_000 }));
      expect(reply.charge.status).toBe('cancelled');
      expect(reply.charge.failureReason).toBe('confirm_failed');
      const payer = await balanceOf(h.pool, tenant, 'payer');
      expect([payer.postedMinor, payer.pendingMinor]).toEqual([10_000, 0]);
      expect(await captureCount(h.pool, tenant, key)).toBe(0);
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      await worker.stop();
    }
  });

  it.each<LedgerStep>(['try', 'confirm'])(
    '%s commits, then the activity fails before reporting: retried, same answer, one debit',
    async (failingStep) => {
      const taskQueue = `faults-${newKey(`lost-${failingStep}`)}`;
      const failedOnce = new Set<string>();
      const worker = await startTestWorker({
        taskQueue,
        pool: h.pool,
        hooks: {
          afterCommit(step, _tenant, key) {
            if (step === failingStep && !failedOnce.has(key)) {
              failedOnce.add(key);
              throw new Error(`connection lost after ${step} committed`);
            }
          },
        },
      });
      try {
        const tenant = await fundedTenant(h, { label: `lost-${failingStep}` });
        const key = newKey();
        const reply = await h.clientFor({ taskQueue }).charge(tenant, key, chargeBody({ amount: 2_500 }));
        expect(failedOnce.has(key)).toBe(true);
        expect(reply.charge.status).toBe('succeeded');
        expect(await captureCount(h.pool, tenant, key)).toBe(1);
        expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(7_500);
        await expectLedgerInvariants(h.pool, tenant);
      } finally {
        await worker.stop();
      }
    },
  );

  it('the worker process dies right after Confirm committed: another worker finishes the charge, one debit', async () => {
    const stack = inject('stack');
    const taskQueue = `faults-${newKey('crash')}`;
    const crashing = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/crash-after-commit-worker.ts'], {
      env: {
        ...process.env,
        TEMPORAL_ADDRESS: stack.temporalAddress,
        DATABASE_URL: stack.databaseUrl,
        TASK_QUEUE: taskQueue,
        WORKFLOW_BUNDLE_PATH: stack.workflowBundlePath,
        CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFile,
        CRASH_AFTER_STEP: 'confirm',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    crashing.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => crashing.once('exit', (code) => resolve(code)));
    await waitFor(async () => output.includes('worker ready'), { timeoutMs: 60_000, what: 'the crashing worker to start' });

    const tenant = await fundedTenant(h, { label: 'crash' });
    const key = newKey();
    const client = h.clientFor({ taskQueue, policy: { activityStartToCloseMs: 2_000 } });
    const { handle } = await client.startCharge(tenant, key, chargeBody({ amount: 3_000 }));
    expect(await exited).toBe(137);
    expect(output).toContain('crashing after confirm committed');
    // The money moved but nobody told Temporal: exactly the window this test is about.
    expect(await captureCount(h.pool, tenant, key)).toBe(1);

    const healthy = await startTestWorker({ taskQueue, pool: h.pool });
    try {
      const charge = await handle.result();
      expect(charge.status).toBe('succeeded');
      const replay = await client.charge(tenant, key, chargeBody({ amount: 3_000, order_id: charge.orderId }));
      expect(replay.replayed).toBe(true);
      expect(replay.charge).toEqual(charge);
    } finally {
      await healthy.stop();
    }
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(7_000);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('system faults on Try are retried with the same key until the ledger answers', async () => {
    const taskQueue = `faults-${newKey('flaky-db')}`;
    let failuresLeft = 3;
    const worker = await startTestWorker({
      taskQueue,
      pool: h.pool,
      hooks: {
        beforeStep(step) {
          if (step === 'try' && failuresLeft-- > 0) throw new Error('connect ECONNREFUSED (injected)');
        },
      },
    });
    try {
      const tenant = await fundedTenant(h, { label: 'flaky' });
      const key = newKey();
      const reply = await h.clientFor({ taskQueue }).charge(tenant, key, chargeBody({ amount: 1_000 }));
      expect(failuresLeft).toBeLessThan(0);
      expect(reply.charge.status).toBe('succeeded');
      expect(await captureCount(h.pool, tenant, key)).toBe(1);
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      await worker.stop();
    }
  });

  it('the caller times out while the charge is in flight; its retry with the same key gets the outcome, one debit', async () => {
    const taskQueue = `faults-${newKey('slow')}`;
    let releaseConfirm!: () => void;
    const confirmReleased = new Promise<void>((resolve) => (releaseConfirm = resolve));
    let confirmStarted = false;
    const worker = await startTestWorker({
      taskQueue,
      pool: h.pool,
      hooks: {
        async beforeStep(step) {
          if (step !== 'confirm') return;
          confirmStarted = true;
          await confirmReleased;
        },
      },
    });
    try {
      const tenant = await fundedTenant(h, { label: 'slow' });
      const key = newKey();
      const body = chargeBody({ amount: 1_500 });
      const client = h.clientFor({ taskQueue });
      const early = await client.charge(tenant, key, body, { waitMs: 300 });
      expect(early.completed).toBe(false);
      expect(early.replayed).toBe(false);
      expect(['pending', 'reserved']).toContain(early.charge.status);

      // A duplicate arriving meanwhile waits for the original instead of failing.
      const duplicate = client.charge(tenant, key, body);
      await waitFor(async () => confirmStarted, { what: 'Confirm to start' });
      releaseConfirm();
      const [late, again] = await Promise.all([duplicate, client.charge(tenant, key, body)]);
      expect(late.completed).toBe(true);
      expect(late.replayed).toBe(true);
      expect(late.charge.status).toBe('succeeded');
      expect(again.charge).toEqual(late.charge);
      expect(await captureCount(h.pool, tenant, key)).toBe(1);
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      releaseConfirm();
      await worker.stop();
    }
  });
});
