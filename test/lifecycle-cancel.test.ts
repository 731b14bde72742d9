import { WorkflowNotFoundError } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { ChargeStateConflictError, NotFoundError } from '../src/domain/errors.js';
import { chargeWorkflowId, type Charge } from '../src/domain/charge.js';
import { cancelHold, confirmHold, readCharge, tryHold } from '../src/ledger/charges.js';
import { LedgerRefusalError } from '../src/ledger/errors.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  expectReconciled,
  fundedTenant,
  newKey,
  useHarness,
  waitFor,
} from './support/harness.js';

const h = useHarness();

describe('cancel', () => {
  it('cancel while RESERVED releases the hold once; a second cancel returns the same charge', async () => {
    const tenant = await fundedTenant(h, { label: 'cancel-reserved', payerMinor: 10_000 });
    const key = newKey();
    const body = chargeBody({ amount: 4_000, capture: 'manual' });
    const reserved = await h.client.charge(tenant, key, body);
    expect(reserved.charge.status).toBe('reserved');
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 10_000, pendingMinor: 4_000 });

    const cancelled = await h.client.cancelCharge(tenant, key);
    expect(cancelled).toMatchObject({ status: 'cancelled', failureReason: 'requested_by_caller', amountHeldMinor: 0 });
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 10_000, pendingMinor: 0, availableMinor: 10_000 });

    const again = await h.client.cancelCharge(tenant, key);
    expect(again).toEqual(cancelled);
    // The charge request itself now replays the cancellation.
    const replay = await h.client.charge(tenant, key, body);
    expect(replay).toMatchObject({ replayed: true, charge: { status: 'cancelled' } });
    expect(await captureCount(h.pool, tenant, key)).toBe(0);
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 10_000, pendingMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('cancel after success is refused with "refund instead"; cancel of a declined charge says so', async () => {
    const tenant = await fundedTenant(h, { label: 'cancel-late', payerMinor: 1_000 });
    const paid = newKey('paid');
    const declined = newKey('declined');
    expect((await h.client.charge(tenant, paid, chargeBody({ amount: 600 }))).charge.status).toBe('succeeded');
    expect((await h.client.charge(tenant, declined, chargeBody({ amount: 5_000 }))).charge.status).toBe('declined');

    const late = await h.client.cancelCharge(tenant, paid).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(ChargeStateConflictError);
    expect((late as ChargeStateConflictError).reason).toBe('ChargeAlreadySucceeded');
    expect((late as Error).message).toMatch(/refund it instead/);
    const nothingHeld = await h.client.cancelCharge(tenant, declined).catch((e: unknown) => e);
    expect((nothingHeld as ChargeStateConflictError).reason).toBe('ChargeDeclined');
    expect(await captureCount(h.pool, tenant, paid)).toBe(1);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('cancel of an unknown key is not found and leaves no workflow and no ledger row behind', async () => {
    const tenant = await fundedTenant(h, { label: 'cancel-unknown', payerMinor: 100_000 });
    const key = newKey('never-charged');
    await expect(h.client.cancelCharge(tenant, key)).rejects.toBeInstanceOf(NotFoundError);
    await expect(h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).describe()).rejects.toBeInstanceOf(
      WorkflowNotFoundError,
    );
    expect(await readCharge(h.pool, tenant, key)).toBeNull();
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('cancel racing capture on 20 reserved charges: exactly one wins each race, the loser is told why', async () => {
    const tenant = await fundedTenant(h, { label: 'race-capture', payerMinor: 100_000 });
    const keys = Array.from({ length: 20 }, (_, i) => newKey(`race-${i}`));
    await Promise.all(keys.map((key) => h.client.charge(tenant, key, chargeBody({ amount: 1_000, capture: 'manual' }))));

    const races = await Promise.all(
      keys.map(async (key, i) => {
        // Alternate who is sent first, so both orders are exercised.
        const [capture, cancel] =
          i % 2 === 0
            ? await Promise.allSettled([h.client.captureCharge(tenant, key), h.client.cancelCharge(tenant, key)])
            : await Promise.allSettled([h.client.cancelCharge(tenant, key), h.client.captureCharge(tenant, key)]).then(
                ([a, b]) => [b, a] as const,
              );
        return { key, capture, cancel };
      }),
    );

    let captured = 0;
    for (const { key, capture, cancel } of races) {
      const winners = [capture, cancel].filter((o) => o.status === 'fulfilled');
      expect(winners, key).toHaveLength(1);
      if (capture.status === 'fulfilled') {
        captured++;
        expect(capture.value.status).toBe('succeeded');
        const reason = (cancel as PromiseRejectedResult).reason as ChargeStateConflictError;
        expect(reason).toBeInstanceOf(ChargeStateConflictError);
        expect(reason.reason).toBe('ChargeAlreadySucceeded');
        expect(await captureCount(h.pool, tenant, key)).toBe(1);
      } else {
        expect((cancel as PromiseFulfilledResult<Charge>).value.status).toBe('cancelled');
        const reason = capture.reason as ChargeStateConflictError;
        expect(reason).toBeInstanceOf(ChargeStateConflictError);
        expect(reason.reason).toBe('ChargeAlreadyCancelled');
        expect(await captureCount(h.pool, tenant, key)).toBe(0);
      }
    }
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({
      postedMinor: 100_000 - captured * 1_000,
      pendingMinor: 0,
    });
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(captured * 1_000);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('cancel sent right after an automatic charge starts, 20 times: cancelled or succeeded, never both', async () => {
    const tenant = await fundedTenant(h, { label: 'race-auto', payerMinor: 100_000 });
    const keys = Array.from({ length: 20 }, (_, i) => newKey(`auto-${i}`));
    const outcomes = await Promise.all(
      keys.map(async (key, i) => {
        const { handle } = await h.client.startCharge(tenant, key, chargeBody({ amount: 1_000 }));
        // Half are cancelled at once (usually before Try), half once Try has written the hold
        // (usually while Confirm runs): both sides of the race get their turn.
        if (i % 2 === 1) await waitFor(() => readCharge(h.pool, tenant, key), { what: `the hold of ${key}` });
        const cancel = await h.client.cancelCharge(tenant, key).then(
          (charge) => ({ won: true as const, charge }),
          (error: unknown) => ({ won: false as const, error }),
        );
        return { key, cancel, final: await handle.result() };
      }),
    );
    let succeeded = 0;
    for (const { key, cancel, final } of outcomes) {
      if (cancel.won) {
        expect(final.status).toBe('cancelled');
        expect(await captureCount(h.pool, tenant, key)).toBe(0);
      } else {
        succeeded++;
        expect(final.status).toBe('succeeded');
        expect((cancel.error as ChargeStateConflictError).reason).toBe('ChargeAlreadySucceeded');
        expect(await captureCount(h.pool, tenant, key)).toBe(1);
      }
    }
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({
      postedMinor: 100_000 - succeeded * 1_000,
      pendingMinor: 0,
    });
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('Confirm racing Cancel in the ledger itself, 20 times: one commits, the other is refused', async () => {
    const tenant = await fundedTenant(h, { label: 'race-ledger', payerMinor: 100_000 });
    const results = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const intent = h.client.buildIntent(tenant, newKey(`ledger-${i}`), chargeBody({ amount: 1_000 }));
        expect((await tryHold(h.pool, intent, 60_000)).holdState).toBe('TRIED');
        const [confirm, cancel] = await Promise.allSettled([
          confirmHold(h.pool, tenant, intent.idempotencyKey, null),
          cancelHold(h.pool, intent, 'requested_by_caller'),
        ]);
        return { confirm, cancel };
      }),
    );
    let confirmed = 0;
    for (const { confirm, cancel } of results) {
      expect([confirm.status, cancel.status].filter((s) => s === 'fulfilled')).toHaveLength(1);
      const loser = (confirm.status === 'rejected' ? confirm : cancel) as PromiseRejectedResult;
      expect(loser.reason).toBeInstanceOf(LedgerRefusalError);
      if (confirm.status === 'fulfilled') {
        confirmed++;
        expect((loser.reason as LedgerRefusalError).type).toBe('HoldAlreadyCaptured');
      } else {
        expect((loser.reason as LedgerRefusalError).type).toBe('HoldCancelled');
      }
    }
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({
      postedMinor: 100_000 - confirmed * 1_000,
      pendingMinor: 0,
    });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('Try racing Cancel on a fresh key, 40 times: the hold is released or never made, and neither step errs', async () => {
    const tenant = await fundedTenant(h, { label: 'race-try-cancel', payerMinor: 100_000 });
    const results = await Promise.all(
      Array.from({ length: 40 }, async (_, i) => {
        const intent = h.client.buildIntent(tenant, newKey(`fresh-${i}`), chargeBody({ amount: 1_000 }));
        const [tried, cancelled] = await Promise.allSettled([
          tryHold(h.pool, intent, 60_000),
          cancelHold(h.pool, intent, 'requested_by_caller'),
        ]);
        return { tried, cancelled };
      }),
    );
    for (const { tried, cancelled } of results) {
      // Cancel always ends CANCELLED; Try either reserved first (then was released) or met the tombstone.
      expect(cancelled.status === 'fulfilled' ? cancelled.value.holdState : cancelled.reason).toBe('CANCELLED');
      if (tried.status === 'fulfilled') {
        expect(tried.value.holdState).toBe('TRIED');
      } else {
        expect(tried.reason).toBeInstanceOf(LedgerRefusalError);
        expect((tried.reason as LedgerRefusalError).type).toBe('HoldCancelled');
      }
    }
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 100_000, pendingMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('cancelling the workflow itself (Web UI, temporal workflow cancel) still releases the hold', async () => {
    const tenant = await fundedTenant(h, { label: 'temporal-cancel', payerMinor: 10_000 });
    const key = newKey();
    expect((await h.client.charge(tenant, key, chargeBody({ amount: 2_500, capture: 'manual' }))).charge.status).toBe(
      'reserved',
    );
    const handle = h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key));
    await handle.cancel();
    const charge = (await handle.result()) as Charge;
    expect(charge).toMatchObject({ status: 'cancelled', failureReason: 'requested_by_caller' });
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 10_000, pendingMinor: 0 });
    expect(await h.client.getCharge(tenant, key)).toEqual(charge);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });
});
