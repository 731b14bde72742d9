import { WorkflowNotFoundError } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import {
  ChargeStateConflictError,
  IdempotencyConflictError,
  NotFoundError,
  ValidationError,
} from '../src/domain/errors.js';
import { RefundRefusedError } from '../src/service/charge-service.js';
import { refundWorkflowId } from '../src/domain/refund.js';
import { LedgerRefusalError } from '../src/ledger/errors.js';
import { refundCharge } from '../src/ledger/refunds.js';
import { deposit } from '../src/ledger/accounts.js';
import { countLedger } from '../src/ledger/reports.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  expectReconciled,
  fundedTenant,
  newKey,
  newTenant,
  openAccount,
  startTestWorker,
  useHarness,
} from './support/harness.js';

const h = useHarness();

async function refundTransfers(tenant: string): Promise<number> {
  return (await countLedger(h.pool, tenant)).transfersByKind.refund ?? 0;
}

/** A tenant with a funded payer, a payee, and one succeeded charge of `amountMinor`. */
async function capturedCharge(label: string, amountMinor: number): Promise<{ tenant: string; key: string }> {
  const tenant = await fundedTenant(h, { label, payerMinor: 100_000 });
  const key = newKey('charge');
  const reply = await h.client.charge(tenant, key, chargeBody({ amount: amountMinor }));
  expect(reply.charge.status).toBe('succeeded');
  return { tenant, key };
}

describe('refunds', () => {
  it('partial + partial, then an over-refund is refused (every time), then the rest: REFUNDED', async () => {
    const { tenant, key } = await capturedCharge('partial', 1_000);

    const first = await h.client.refund(tenant, key, 'r1', { amount: 300 });
    expect(first).toMatchObject({ replayed: false, completed: true });
    expect(first.refund).toMatchObject({ status: 'succeeded', amountMinor: 300, refundKey: 'r1', chargeKey: key });
    expect((await h.client.getCharge(tenant, key)).status).toBe('partially_refunded');

    const second = await h.client.refund(tenant, key, 'r2', { amount: 500 });
    expect(second.refund).toMatchObject({ status: 'succeeded', amountMinor: 500 });
    expect(await h.client.getCharge(tenant, key)).toMatchObject({
      status: 'partially_refunded',
      amountCapturedMinor: 1_000,
      amountRefundedMinor: 800,
    });

    // 200 left: 300 is refused, and the refusal is the answer for that refund key from now on.
    const over = await h.client.refund(tenant, key, 'r3', { amount: 300 }).catch((e: unknown) => e);
    expect(over).toBeInstanceOf(RefundRefusedError);
    expect(over).toBeInstanceOf(ChargeStateConflictError);
    expect((over as RefundRefusedError).reason).toBe('RefundExceedsRefundable');
    expect((over as RefundRefusedError).refund).toMatchObject({ status: 'failed', failureCode: 'exceeds_refundable' });
    const overAgain = await h.client.refund(tenant, key, 'r3', { amount: 300 }).catch((e: unknown) => e);
    expect((overAgain as RefundRefusedError).refund).toEqual((over as RefundRefusedError).refund);

    // No amount: everything that is left.
    const rest = await h.client.refund(tenant, key, 'r4', {});
    expect(rest.refund).toMatchObject({ status: 'succeeded', amountMinor: 200, requestedAmountMinor: null });
    const charge = await h.client.getCharge(tenant, key);
    expect(charge).toMatchObject({ status: 'refunded', amountRefundedMinor: 1_000 });
    await expect(h.client.refund(tenant, key, 'r5', {})).rejects.toBeInstanceOf(RefundRefusedError);

    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100_000);
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(0);
    expect(await refundTransfers(tenant)).toBe(3);
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    const refunds = await h.client.listRefunds(tenant, key);
    expect(refunds.map((r) => [r.refundKey, r.status, r.amountMinor])).toEqual([
      ['r1', 'succeeded', 300],
      ['r2', 'succeeded', 500],
      ['r3', 'failed', 300],
      ['r4', 'succeeded', 200],
      ['r5', 'failed', 0],
    ]);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('20 concurrent refunds with distinct keys whose sum exceeds the capture never refund more than it', async () => {
    const { tenant, key } = await capturedCharge('concurrent', 1_000);
    const amounts = Array.from({ length: 20 }, (_, i) => 60 + 7 * i); // 60..193, 2,530 in all
    const outcomes = await Promise.allSettled(
      amounts.map((amount, i) => h.client.refund(tenant, key, `r-${i}`, { amount })),
    );

    const succeeded = outcomes.flatMap((o) => (o.status === 'fulfilled' ? [o.value.refund] : []));
    const refused = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as unknown] : []));
    for (const reason of refused) {
      expect(reason).toBeInstanceOf(RefundRefusedError);
      expect((reason as RefundRefusedError).reason).toBe('RefundExceedsRefundable');
    }
    expect(succeeded.length).toBeGreaterThan(0);
    expect(refused.length).toBeGreaterThan(0);
    const refundedMinor = succeeded.reduce((sum, r) => sum + (r.amountMinor ?? 0), 0);
    expect(refundedMinor).toBeLessThanOrEqual(1_000);
    // Every refused refund was refused for a reason: it did not fit in what was left at its turn.
    const smallestRefused = Math.min(...refused.map((r) => (r as RefundRefusedError).refund.amountMinor ?? 0));
    expect(refundedMinor + smallestRefused).toBeGreaterThan(1_000);

    const charge = await h.client.getCharge(tenant, key);
    expect(charge.amountRefundedMinor).toBe(refundedMinor);
    expect(await refundTransfers(tenant)).toBe(succeeded.length);
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(1_000 - refundedMinor);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('a repeated refund key returns the first result; the same key with another amount is a typed conflict', async () => {
    const { tenant, key } = await capturedCharge('replay', 1_000);
    const first = await h.client.refund(tenant, key, 'once', { amount: 250 });
    const replies = await Promise.all(Array.from({ length: 5 }, () => h.client.refund(tenant, key, 'once', { amount: 250 })));
    for (const reply of replies) {
      expect(reply.replayed).toBe(true);
      expect(reply.refund).toEqual(first.refund);
    }
    await expect(h.client.refund(tenant, key, 'once', { amount: 251 })).rejects.toBeInstanceOf(IdempotencyConflictError);
    // "the rest" is another request than "250", even when 250 was the rest.
    await expect(h.client.refund(tenant, key, 'once', {})).rejects.toBeInstanceOf(IdempotencyConflictError);

    expect(await refundTransfers(tenant)).toBe(1);
    expect((await h.client.getCharge(tenant, key)).amountRefundedMinor).toBe(250);
    expect(await h.client.getRefund(tenant, key, 'once')).toEqual(first.refund);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('the ledger alone remembers refund keys (as it must once Temporal forgets): same request replays, another is refused', async () => {
    const { tenant, key } = await capturedCharge('ledger-keys', 1_000);
    const first = await h.client.refund(tenant, key, 'r', { amount: 100 });
    // Straight to the ledger function, as a new execution would after the retention period.
    const replay = await refundCharge(h.pool, h.client.buildRefundIntent(tenant, key, 'r', { amount: 100 }));
    expect(replay.refund).toEqual(first.refund);
    const conflict = await refundCharge(h.pool, h.client.buildRefundIntent(tenant, key, 'r', { amount: 999 })).catch(
      (e: unknown) => e,
    );
    expect(conflict).toBeInstanceOf(LedgerRefusalError);
    expect((conflict as LedgerRefusalError).type).toBe('IdempotencyConflict');
    expect(await refundTransfers(tenant)).toBe(1);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('refunds of uncaptured or unknown charges are refused before anything starts', async () => {
    const tenant = await fundedTenant(h, { label: 'uncaptured', payerMinor: 1_000 });
    const held = newKey('held');
    const declined = newKey('declined');
    expect((await h.client.charge(tenant, held, chargeBody({ capture: 'manual' }))).charge.status).toBe('reserved');
    expect((await h.client.charge(tenant, declined, chargeBody({ amount: 5_000 }))).charge.status).toBe('declined');

    for (const key of [held, declined]) {
      const error = await h.client.refund(tenant, key, 'r', {}).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ChargeStateConflictError);
      expect((error as ChargeStateConflictError).reason).toBe('ChargeNotCaptured');
      await expect(h.temporal.workflow.getHandle(refundWorkflowId(tenant, key, 'r')).describe()).rejects.toBeInstanceOf(
        WorkflowNotFoundError,
      );
    }
    await expect(h.client.refund(tenant, newKey('nobody'), 'r', {})).rejects.toBeInstanceOf(NotFoundError);
    await expect(h.client.refund(tenant, held, 'r', { amount: 1.5 })).rejects.toBeInstanceOf(ValidationError);
    await expect(h.client.refund(tenant, held, 'r', { amount: 1, reason: 'x' })).rejects.toBeInstanceOf(ValidationError);
    // Another tenant cannot see the charge at all.
    await expect(h.client.refund(newTenant('other'), held, 'r', {})).rejects.toBeInstanceOf(NotFoundError);

    await h.client.cancelCharge(tenant, held);
    expect((await countLedger(h.pool, tenant)).refunds).toEqual({ succeeded: 0, failed: 0 });
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('a payee that cannot pay the refund back: refused at once, recorded, and a new key works once it is funded', async () => {
    const { tenant, key } = await capturedCharge('payee-short', 1_000);
    // The payee spends 900 of the 1,000 it received.
    await openAccount(h.pool, tenant, 'supplier');
    const spend = await h.client.charge(
      tenant,
      newKey('spend'),
      chargeBody({ payer_account_id: 'payee', payee_account_id: 'supplier', amount: 900 }),
    );
    expect(spend.charge.status).toBe('succeeded');

    const short = await h.client.refund(tenant, key, 'r', { amount: 500 }).catch((e: unknown) => e);
    expect(short).toBeInstanceOf(RefundRefusedError);
    expect((short as RefundRefusedError).reason).toBe('RefundInsufficientFunds');
    expect((short as RefundRefusedError).refund.failureCode).toBe('insufficient_funds');
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(100);
    expect((await h.client.getCharge(tenant, key)).status).toBe('succeeded');

    await deposit(h.pool, tenant, 'payee', 1_000, 'top-up');
    // The refusal was a decision: the same refund key keeps it, a new one is a new refund.
    await expect(h.client.refund(tenant, key, 'r', { amount: 500 })).rejects.toBeInstanceOf(RefundRefusedError);
    const retried = await h.client.refund(tenant, key, 'r-after-top-up', { amount: 500 });
    expect(retried.refund.status).toBe('succeeded');
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(600);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('keys containing "/" never make two refunds share a workflow or a transfer', async () => {
    const tenant = await fundedTenant(h, { label: 'slash' });
    const base = newKey('k');
    await h.client.charge(tenant, `${base}/b`, chargeBody({ amount: 1_000 }));
    await h.client.charge(tenant, base, chargeBody({ amount: 1_000 }));
    // Joined naively, both would be `<base>/b/c`.
    const one = await h.client.refund(tenant, `${base}/b`, 'c', { amount: 100 });
    const other = await h.client.refund(tenant, base, 'b/c', { amount: 200 });
    expect([one.replayed, other.replayed]).toEqual([false, false]);
    expect([one.refund.amountMinor, other.refund.amountMinor]).toEqual([100, 200]);
    expect(refundWorkflowId(tenant, `${base}/b`, 'c')).not.toBe(refundWorkflowId(tenant, base, 'b/c'));
    expect(await refundTransfers(tenant)).toBe(2);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('a worker that dies after the refund committed: the retry returns the same refund, one transfer', async () => {
    const { tenant, key } = await capturedCharge('crash', 1_000);
    const taskQueue = `refund-crash-${newKey()}`;
    let crashes = 0;
    const worker = await startTestWorker({
      taskQueue,
      pool: h.pool,
      refundHooks: {
        afterCommit: () => {
          if (crashes++ === 0) throw new Error('worker lost its connection after the refund committed');
        },
      },
    });
    try {
      const reply = await h.clientFor({ taskQueue }).refund(tenant, key, 'r', { amount: 400 });
      expect(reply.refund).toMatchObject({ status: 'succeeded', amountMinor: 400 });
      expect(crashes).toBe(2);
    } finally {
      await worker.stop();
    }
    expect(await refundTransfers(tenant)).toBe(1);
    expect((await h.client.getCharge(tenant, key)).amountRefundedMinor).toBe(400);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });
});
