import { WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { ChargeStateConflictError } from '../src/domain/errors.js';
import { chargeWorkflowId, type Charge } from '../src/domain/charge.js';
import { captureChargeUpdate } from '../workflows/definitions.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  expectReconciled,
  fundedTenant,
  newKey,
  startTestWorker,
  useHarness,
} from './support/harness.js';

const h = useHarness();

const manual = (amount: number) => chargeBody({ amount, capture: 'manual' });

describe('manual capture', () => {
  it('reserves, then captures the full amount once; a repeated capture returns the same charge', async () => {
    const tenant = await fundedTenant(h, { label: 'capture-full' });
    const key = newKey();
    const reserved = await h.client.charge(tenant, key, manual(3_000));
    expect(reserved.charge).toMatchObject({ status: 'reserved', amountHeldMinor: 3_000 });
    expect(reserved.charge.holdExpiresAt).not.toBeNull();
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 10_000, pendingMinor: 3_000 });

    const captured = await h.client.captureCharge(tenant, key);
    expect(captured).toMatchObject({ status: 'succeeded', amountCapturedMinor: 3_000, amountHeldMinor: 0 });
    expect(await h.client.captureCharge(tenant, key)).toEqual(captured);
    expect(await h.client.captureCharge(tenant, key, 3_000)).toEqual(captured);

    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 7_000, pendingMinor: 0 });
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(3_000);
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('captures part of the hold and releases the rest; another amount afterwards is a conflict', async () => {
    const tenant = await fundedTenant(h, { label: 'capture-partial' });
    const key = newKey();
    await h.client.charge(tenant, key, manual(3_000));
    const captured = await h.client.captureCharge(tenant, key, 1_200);
    expect(captured).toMatchObject({ status: 'succeeded', amountMinor: 3_000, amountCapturedMinor: 1_200, amountHeldMinor: 0 });
    // The 1,800 not captured is available again, not pending.
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 8_800, pendingMinor: 0, availableMinor: 8_800 });
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(1_200);

    const other = await h.client.captureCharge(tenant, key, 1_300).catch((e: unknown) => e);
    expect(other).toBeInstanceOf(ChargeStateConflictError);
    expect((other as ChargeStateConflictError).reason).toBe('CaptureAmountConflict');
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('an uncaptured hold is voided when holdTtlMs expires (a Temporal timer); a capture afterwards is refused', async () => {
    const tenant = await fundedTenant(h, { label: 'capture-expiry' });
    const key = newKey();
    const client = h.clientFor({ policy: { holdTtlMs: 1_500 } });
    const { handle } = await client.startCharge(tenant, key, manual(2_000));
    // Nobody captures: the workflow's own timer ends it. We wait on its result, not on a clock.
    const expired = (await handle.result()) as Charge;
    expect(expired).toMatchObject({ status: 'cancelled', failureReason: 'hold_expired', amountHeldMinor: 0 });
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 10_000, pendingMinor: 0 });

    const late = await client.captureCharge(tenant, key).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(ChargeStateConflictError);
    expect((late as ChargeStateConflictError).reason).toBe('ChargeAlreadyCancelled');
    expect((late as Error).message).toMatch(/hold expired/);
    expect(await captureCount(h.pool, tenant, key)).toBe(0);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('capture after cancel is refused; capture of an automatic charge is refused', async () => {
    const tenant = await fundedTenant(h, { label: 'capture-refused' });
    const cancelled = newKey('cancelled');
    await h.client.charge(tenant, cancelled, manual(1_000));
    await h.client.cancelCharge(tenant, cancelled);
    const afterCancel = await h.client.captureCharge(tenant, cancelled).catch((e: unknown) => e);
    expect((afterCancel as ChargeStateConflictError).reason).toBe('ChargeAlreadyCancelled');
    expect((afterCancel as Error).message).toMatch(/it was cancelled/);

    const automatic = newKey('automatic');
    await h.client.charge(tenant, automatic, chargeBody({ amount: 1_000 }));
    const notManual = await h.client.captureCharge(tenant, automatic).catch((e: unknown) => e);
    expect((notManual as ChargeStateConflictError).reason).toBe('ChargeNotManualCapture');
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 9_000, pendingMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('two captures before the hold is made: the first one decides the amount, the second is told', async () => {
    const tenant = await fundedTenant(h, { label: 'capture-first-wins' });
    const key = newKey();
    const taskQueue = `capture-gate-${newKey()}`;
    let openGate!: () => void;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    // Try waits for the gate, so both captures are accepted while the charge is still pending.
    const worker = await startTestWorker({
      taskQueue,
      pool: h.pool,
      hooks: { beforeStep: async (step, _tenant, k) => (step === 'try' && k === key ? gate : undefined) },
    });
    try {
      await h.clientFor({ taskQueue }).startCharge(tenant, key, manual(3_000));
      const handle = h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key));
      const everything = await handle.startUpdate(captureChargeUpdate, { args: [{ amountMinor: null }], waitForStage: 'ACCEPTED' });
      const part = await handle.startUpdate(captureChargeUpdate, { args: [{ amountMinor: 500 }], waitForStage: 'ACCEPTED' });
      openGate();

      expect(await everything.result()).toMatchObject({ status: 'succeeded', amountCapturedMinor: 3_000 });
      const refused = await part.result().catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(WorkflowUpdateFailedError);
      expect(((refused as WorkflowUpdateFailedError).cause as ApplicationFailure).type).toBe('CaptureAmountConflict');
    } finally {
      openGate();
      await worker.stop();
    }
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 7_000, pendingMinor: 0 });
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });
});
