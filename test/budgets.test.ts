import { refundWorkflowId } from '../src/domain/refund.js';
import { describe, expect, it } from 'vitest';
import type { LedgerActivityHooks, LedgerStep } from '../activities/index.js';
import { chargeWorkflowId, type Charge, type ChargeIntent } from '../src/domain/charge.js';
import { cancelReasons } from '../src/domain/refusals.js';
import { chargeFingerprint } from '../src/domain/request-fingerprint.js';
import { readCharge } from '../src/ledger/charges.js';
import type { ChargePolicy } from '../workflows/definitions.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  fundedTenant,
  newKey,
  startTestWorker,
  testPolicy,
  useHarness,
} from './support/harness.js';

const h = useHarness();

/** A budget short enough for a test, long enough that a healthy step never comes near it. */
const shortBudgetMs = 3_000;
/**
 * A failing step gives itself up once its next attempt could only start after the deadline the
 * workflow passed it (its budget from the step's first scheduling, in workflow time): at most one
 * backoff interval (10 s at most) after the budget. Plus slack for a machine shared with other test runs.
 */
const givenUpWithinMs = shortBudgetMs + 10_000 + 5_000;

/** Counts every attempt of every ledger step per key, and lets a test fail the steps it names. */
function countingHooks(fail: (step: LedgerStep) => Error | null): {
  hooks: LedgerActivityHooks;
  attempts: (key: string, step: LedgerStep) => number;
} {
  const counts = new Map<string, number>();
  return {
    hooks: {
      beforeStep(step, _tenant, key) {
        counts.set(`${key}\n${step}`, (counts.get(`${key}\n${step}`) ?? 0) + 1);
        const error = fail(step);
        if (error) throw error;
      },
    },
    attempts: (key, step) => counts.get(`${key}\n${step}`) ?? 0,
  };
}

/** A PostgreSQL error as node-postgres reports it. */
function sqlError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

/**
 * Starts a charge from an intent as it would reach the worker if validation at the edge ever let
 * something through: the workflow and the ledger are the last line of defence.
 */
async function startFromIntent(intent: ChargeIntent, taskQueue: string, policy: ChargePolicy): Promise<Charge> {
  const handle = await h.temporal.workflow.start('ChargeWorkflow', {
    taskQueue,
    workflowId: chargeWorkflowId(intent.tenant, intent.idempotencyKey),
    args: [{ intent, policy }],
    memo: { fingerprint: intent.fingerprint },
    workflowIdReusePolicy: 'REJECT_DUPLICATE',
  });
  return (await handle.result()) as Charge;
}

describe('errors retrying cannot cure are decided at once', () => {
  it('a NUL in order_id that reaches the ledger: one Try, one Cancel, cancelled, nothing recorded, surfaces agree', async () => {
    const taskQueue = `budgets-${newKey('nul')}`;
    const counter = countingHooks(() => null);
    const worker = await startTestWorker({ taskQueue, pool: h.pool, hooks: counter.hooks });
    try {
      const tenant = await fundedTenant(h, { label: 'nul' });
      const key = newKey('nul');
      const valid = h.client.buildIntent(tenant, key, chargeBody({ amount: 1_200 }));
      // Fingerprinted as the service fingerprints what it validated: the workflow refuses a start
      // whose fingerprint does not match its request (ForgedStart).
      const poisonedRequest = { ...valid.request, orderId: 'order-\u0000-1' };
      const poisoned: ChargeIntent = { ...valid, request: poisonedRequest, fingerprint: chargeFingerprint(poisonedRequest) };

      const started = Date.now();
      const charge = await startFromIntent(poisoned, taskQueue, testPolicy);
      const decidedMs = Date.now() - started;

      expect(charge.status).toBe('cancelled');
      expect(charge.failureReason).toBe(cancelReasons.ledgerRejectedData);
      // Decided at once: PostgreSQL rejected the value (22021) and nobody asked it again.
      expect(counter.attempts(key, 'try')).toBe(1);
      expect(counter.attempts(key, 'cancel')).toBe(1);
      expect(decidedMs).toBeLessThan(10_000);
      // The tombstone could not be written either, and none is needed: no Try of these values can commit.
      expect(await readCharge(h.pool, tenant, key)).toBeNull();
      const payer = await balanceOf(h.pool, tenant, 'payer');
      expect([payer.postedMinor, payer.pendingMinor]).toEqual([10_000, 0]);

      const client = h.clientFor({ taskQueue });
      expect(await client.getCharge(tenant, key)).toMatchObject({ status: 'cancelled', failureReason: 'ledger_rejected_data' });
      // A cancel answers the decided charge (not 404, not 500); a capture is refused.
      expect(await client.cancelCharge(tenant, key)).toMatchObject({ status: 'cancelled' });
      await expectLedgerInvariants(h.pool, tenant);
      console.log(`NUL in order_id: decided in ${decidedMs} ms, try attempts 1, cancel attempts 1`);
    } finally {
      await worker.stop();
    }
  });

  it('a data error on Try whose Cancel can still write its tombstone: one Try, the tombstone says why', async () => {
    const taskQueue = `budgets-${newKey('data')}`;
    const counter = countingHooks((step) =>
      step === 'try' ? sqlError('22003', 'value out of range for type bigint (injected)') : null,
    );
    const worker = await startTestWorker({ taskQueue, pool: h.pool, hooks: counter.hooks });
    try {
      const tenant = await fundedTenant(h, { label: 'data' });
      const key = newKey('data');
      const reply = await h.clientFor({ taskQueue }).charge(tenant, key, chargeBody({ amount: 700 }));
      expect(reply.charge.status).toBe('cancelled');
      expect(reply.charge.failureReason).toBe(cancelReasons.ledgerRejectedData);
      expect(counter.attempts(key, 'try')).toBe(1);
      const row = await readCharge(h.pool, tenant, key);
      expect(row?.holdState).toBe('CANCELLED');
      expect(row?.charge.failureReason).toBe(cancelReasons.ledgerRejectedData);
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      await worker.stop();
    }
  });

  it('a rejected statement (class 42) on Cancel is retried until Cancel succeeds: a hold is never abandoned', async () => {
    const taskQueue = `budgets-${newKey('s42')}`;
    let cancelFailuresLeft = 3;
    const counter = countingHooks((step) => {
      if (step === 'confirm') return sqlError('22003', 'numeric field overflow (injected)');
      if (step === 'cancel' && cancelFailuresLeft-- > 0) return sqlError('42883', 'function ledger_cancel does not exist (injected)');
      return null;
    });
    const worker = await startTestWorker({ taskQueue, pool: h.pool, hooks: counter.hooks });
    try {
      const tenant = await fundedTenant(h, { label: 's42' });
      const key = newKey('s42');
      const reply = await h.clientFor({ taskQueue }).charge(tenant, key, chargeBody({ amount: 900 }));
      expect(reply.charge.status).toBe('cancelled');
      expect(reply.charge.failureReason).toBe(cancelReasons.ledgerRejectedData);
      expect(counter.attempts(key, 'confirm')).toBe(1);
      expect(counter.attempts(key, 'cancel')).toBe(4);
      const payer = await balanceOf(h.pool, tenant, 'payer');
      expect([payer.postedMinor, payer.pendingMinor]).toEqual([10_000, 0]);
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      await worker.stop();
    }
  });
});

describe('a refund whose values the ledger rejects', () => {
  it('fails at once with LedgerDataRejected instead of retrying for ever; nothing moves', async () => {
    const tenant = await fundedTenant(h, { label: 'refund-nul' });
    const chargeKey = newKey('charged');
    const charged = await h.client.charge(tenant, chargeKey, chargeBody({ amount: 1_000 }));
    expect(charged.charge.status).toBe('succeeded');
    const valid = h.client.buildRefundIntent(tenant, chargeKey, newKey('refund'), { amount: 400 });
    const intent = { ...valid, refundKey: `${valid.refundKey}\u0000` };
    const pending = {
      id: intent.refundId,
      tenant,
      chargeKey,
      chargeId: charged.charge.id,
      refundKey: intent.refundKey,
      amountMinor: 400,
      requestedAmountMinor: 400,
      currency: 'USD',
      status: 'pending' as const,
      failureCode: null,
      createdAt: new Date().toISOString(),
    };
    const started = Date.now();
    const handle = await h.temporal.workflow.start('RefundWorkflow', {
      taskQueue: 'charges',
      // The id of the refund the input names: a refund refuses an input naming another one.
      workflowId: refundWorkflowId(tenant, chargeKey, intent.refundKey),
      args: [{ intent, pending, policy: { activityStartToCloseMs: testPolicy.activityStartToCloseMs } }],
    });
    const failure = await handle.result().then(
      () => null,
      (error: unknown) => error as Error,
    );
    const decidedMs = Date.now() - started;
    expect(failure).not.toBeNull();
    let cause: unknown = failure;
    const types: string[] = [];
    for (; cause instanceof Error; cause = cause.cause) types.push((cause as { type?: string }).type ?? cause.name);
    expect(types).toContain('LedgerDataRejected');
    expect(decidedMs).toBeLessThan(10_000);
    const payee = await balanceOf(h.pool, tenant, 'payee');
    expect(payee.postedMinor).toBe(1_000);
    await expectLedgerInvariants(h.pool, tenant);
  });
});

describe('budgets are hard limits for local activities', () => {
  it.each<{ step: 'try' | 'confirm'; reason: string }>([
    { step: 'try', reason: cancelReasons.tryBudgetExhausted },
    { step: 'confirm', reason: cancelReasons.confirmBudgetExhausted },
  ])('$step failing on a system fault for longer than its budget is given up and compensated ($reason)', async ({ step, reason }) => {
    const taskQueue = `budgets-${newKey(step)}`;
    const counter = countingHooks((failing) => (failing === step ? sqlError('57P03', 'the database system is starting up (injected)') : null));
    const worker = await startTestWorker({ taskQueue, pool: h.pool, hooks: counter.hooks });
    try {
      const tenant = await fundedTenant(h, { label: `budget-${step}` });
      const key = newKey(step);
      const policy: Partial<ChargePolicy> = step === 'try' ? { tryBudgetMs: shortBudgetMs } : { confirmBudgetMs: shortBudgetMs };
      const started = Date.now();
      const reply = await h.clientFor({ taskQueue, policy }).charge(tenant, key, chargeBody({ amount: 2_000 }));
      const compensatedMs = Date.now() - started;

      expect(reply.completed).toBe(true);
      expect(reply.charge.status).toBe('cancelled');
      expect(reply.charge.failureReason).toBe(reason);
      // Retried while the budget lasted (a system fault is never a decision), then given up.
      expect(counter.attempts(key, step)).toBeGreaterThan(3);
      expect(compensatedMs).toBeLessThan(givenUpWithinMs);
      expect(counter.attempts(key, 'cancel')).toBeGreaterThanOrEqual(1);

      const row = await readCharge(h.pool, tenant, key);
      expect(row?.holdState).toBe('CANCELLED');
      expect(row?.charge.failureReason).toBe(reason);
      expect(await captureCount(h.pool, tenant, key)).toBe(0);
      const payer = await balanceOf(h.pool, tenant, 'payer');
      expect([payer.postedMinor, payer.pendingMinor]).toEqual([10_000, 0]);
      await expectLedgerInvariants(h.pool, tenant);

      // Once given up, the step is not retried behind the workflow's back.
      const attemptsAtDecision = counter.attempts(key, step);
      const closed = await h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).describe();
      expect(closed.status.name).toBe('COMPLETED');
      expect(counter.attempts(key, step)).toBe(attemptsAtDecision);
      console.log(`${step} budget ${shortBudgetMs} ms: compensated after ${compensatedMs} ms, ${attemptsAtDecision} attempts`);
    } finally {
      await worker.stop();
    }
  });

  it('a Try that hangs (every attempt times out) is given up at its budget too', async () => {
    const taskQueue = `budgets-${newKey('hang')}`;
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const counter = countingHooks(() => null);
    const worker = await startTestWorker({
      taskQueue,
      pool: h.pool,
      hooks: {
        async beforeStep(step, tenant, key) {
          await counter.hooks.beforeStep?.(step, tenant, key);
          if (step === 'try') await released; // a connection that never answers
        },
      },
    });
    try {
      const tenant = await fundedTenant(h, { label: 'hang' });
      const key = newKey('hang');
      const policy = { tryBudgetMs: shortBudgetMs, activityStartToCloseMs: 1_000 };
      const started = Date.now();
      const reply = await h.clientFor({ taskQueue, policy }).charge(tenant, key, chargeBody({ amount: 300 }));
      const compensatedMs = Date.now() - started;
      expect(reply.charge).toMatchObject({ status: 'cancelled', failureReason: cancelReasons.tryBudgetExhausted });
      expect(counter.attempts(key, 'try')).toBeGreaterThanOrEqual(2);
      expect(compensatedMs).toBeLessThan(givenUpWithinMs);
      // The hung attempts never reached the ledger; the tombstone keeps any late one from reserving.
      expect((await readCharge(h.pool, tenant, key))?.holdState).toBe('CANCELLED');
      expect((await balanceOf(h.pool, tenant, 'payer')).pendingMinor).toBe(0);
      await expectLedgerInvariants(h.pool, tenant);
      console.log(`hung try, budget ${shortBudgetMs} ms: compensated after ${compensatedMs} ms, ${counter.attempts(key, 'try')} attempts`);
    } finally {
      release();
      await worker.stop();
    }
  });

  it('a step failing while the database is away is retried at most ledgerRetryMaxIntervalMs apart, and succeeds once it is back', async () => {
    const taskQueue = `budgets-${newKey('outage')}`;
    const retryMaxMs = 300;
    const failedAttempts = 7; // backoff 200, 300, 300, ... ms here; 200, 400, 800, 1600, 3200, 6400 ms at the old 10 s cap
    const attemptsAtMs: number[] = [];
    const worker = await startTestWorker({
      taskQueue,
      pool: h.pool,
      hooks: {
        beforeStep(step) {
          if (step !== 'try') return;
          attemptsAtMs.push(Date.now());
          if (attemptsAtMs.length <= failedAttempts) throw sqlError('57P03', 'the database system is starting up (injected)');
        },
      },
    });
    try {
      const tenant = await fundedTenant(h, { label: 'outage' });
      const key = newKey('outage');
      const reply = await h.clientFor({ taskQueue, policy: { ledgerRetryMaxIntervalMs: retryMaxMs } }).charge(tenant, key, chargeBody({ amount: 700 }));
      expect(reply.charge.status).toBe('succeeded');
      expect(attemptsAtMs).toHaveLength(failedAttempts + 1);
      const gapsMs = attemptsAtMs.slice(1).map((atMs, index) => atMs - attemptsAtMs[index]!);
      // Never more than the cap (plus a scheduling slack), and the cap is reached: the backoff grew to it.
      expect(Math.max(...gapsMs)).toBeLessThan(retryMaxMs + 700);
      expect(gapsMs.filter((gapMs) => gapMs >= retryMaxMs - 50).length).toBeGreaterThanOrEqual(3);
      expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 700);
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      await worker.stop();
    }
  });

  it('a healthy charge under step budgets: no timer event in its history', async () => {
    const tenant = await fundedTenant(h, { label: 'healthy' });
    const key = newKey('healthy');
    const reply = await h.client.charge(tenant, key, chargeBody({ amount: 100 }));
    expect(reply.charge.status).toBe('succeeded');
    const history = await h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).fetchHistory();
    expect(history.events?.some((event) => event.timerStartedEventAttributes)).toBe(false);
    const markers = history.events?.flatMap((event) => event.markerRecordedEventAttributes?.markerName ?? []) ?? [];
    expect(markers).toContain('core_patch');
  });
});
