import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiMetrics } from '../src/api/metrics.js';
import { LedgerReadings } from '../src/service/ledger-readings.js';
import { fundedApiTenant, openTestApi } from './support/api.js';
import { ChargeStateConflictError } from '../src/domain/errors.js';
import { chargeWorkflowId, type Charge } from '../src/domain/charge.js';
import { cancelReasons } from '../src/domain/refusals.js';
import { readCharge, tryHold } from '../src/ledger/charges.js';
import { ensureHoldSweeperSchedule } from '../src/worker/hold-sweeper-schedule.js';
import {
  holdSweeperWorkflowType,
  releaseHoldWorkflowId,
  type HoldSweepInput,
  type HoldSweepResult,
} from '../workflows/definitions.js';
import {
  balanceOf,
  chargeBody,
  expectLedgerInvariants,
  fundedTenant,
  newKey,
  startTestWorker,
  useHarness,
  waitFor,
} from './support/harness.js';

const h = useHarness();
let worker: Awaited<ReturnType<typeof startTestWorker>> | undefined;
const taskQueue = `sweeper-${newKey('q')}`;

beforeAll(async () => {
  // A worker of this file's own, with the sweeper's activities and their Temporal client (built
  // on the worker's connection), and no schedule of its own: the tests create theirs.
  worker = await startTestWorker({ taskQueue, pool: h.pool, holdSweeper: false });
});
afterAll(async () => {
  await worker?.stop();
});

/** Sweeps with no waiting: every stranded hold of these tests is judged at once. */
const eagerSweep: HoldSweepInput = {
  releaseBatchSize: 50,
  expiredGraceMs: 0,
  orphanMinAgeMs: 0,
  orphanExaminedMax: 10_000,
  activityStartToCloseMs: 10_000,
};

/** Scoped to one tenant: other test files share this ledger and keep holds of their own. */
async function sweepOnce(tenant: string, input: Partial<HoldSweepInput> = {}): Promise<{ result: HoldSweepResult; ms: number }> {
  const started = Date.now();
  const result = await h.temporal.workflow.execute<(input: HoldSweepInput) => Promise<HoldSweepResult>>(holdSweeperWorkflowType, {
    taskQueue,
    workflowId: `sweep-${newKey('run')}`,
    args: [{ ...eagerSweep, tenant, ...input }],
  });
  return { result, ms: Date.now() - started };
}

/** A manual-capture hold whose workflow an operator terminated: nothing will settle it. */
async function orphanedHold(tenant: string, amount: number): Promise<string> {
  const key = newKey('orphan');
  const reply = await h.clientFor({ taskQueue }).charge(tenant, key, chargeBody({ amount, capture: 'manual' }));
  expect(reply.charge.status).toBe('reserved');
  await h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).terminate('operator stopped it (test)');
  expect((await readCharge(h.pool, tenant, key))?.holdState).toBe('TRIED');
  return key;
}

async function refusalOf(promise: Promise<unknown>): Promise<ChargeStateConflictError> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ChargeStateConflictError);
  return error as ChargeStateConflictError;
}

describe('a hold whose workflow was terminated', () => {
  it('get, capture and cancel tell the truth; the cancel releases it at once', async () => {
    const tenant = await fundedTenant(h, { label: 'orphan-cancel' });
    const key = await orphanedHold(tenant, 3_000);
    const client = h.clientFor({ taskQueue });
    expect((await balanceOf(h.pool, tenant, 'payer')).pendingMinor).toBe(3_000);

    // Still held (the balances say so) but nothing will capture it: the charge says why.
    expect(await client.getCharge(tenant, key)).toMatchObject({ status: 'reserved', failureReason: cancelReasons.holdOrphaned });
    // Capture is refused with a reason, never a 200 "reserved" that captured nothing.
    const refused = await refusalOf(client.captureCharge(tenant, key));
    expect(refused.reason).toBe('ChargeHoldOrphaned');
    expect(refused.message).toMatch(/workflow ended without settling the hold/);
    expect((await readCharge(h.pool, tenant, key))?.holdState).toBe('TRIED');

    // Cancel: not a false "already succeeded", but the release the caller asked for.
    const cancelled = await client.cancelCharge(tenant, key);
    expect(cancelled).toMatchObject({ status: 'cancelled', failureReason: cancelReasons.requestedByCaller, amountHeldMinor: 0 });
    const release = await h.temporal.workflow.getHandle(releaseHoldWorkflowId(tenant, key)).describe();
    expect(release.status.name).toBe('COMPLETED');
    const payer = await balanceOf(h.pool, tenant, 'payer');
    expect([payer.postedMinor, payer.pendingMinor]).toEqual([10_000, 0]);

    // Repeats answer the same; capture now says it was cancelled.
    expect(await client.cancelCharge(tenant, key)).toMatchObject({ status: 'cancelled' });
    expect((await refusalOf(client.captureCharge(tenant, key))).reason).toBe('ChargeAlreadyCancelled');
    expect(await client.getCharge(tenant, key)).toMatchObject({ status: 'cancelled' });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('the sweeper voids it (hold_orphaned) and leaves holds whose workflow still waits alone', async () => {
    const tenant = await fundedTenant(h, { label: 'orphan-sweep' });
    const orphan = await orphanedHold(tenant, 2_500);
    const waiting = newKey('waiting');
    await h.clientFor({ taskQueue }).charge(tenant, waiting, chargeBody({ amount: 1_000, capture: 'manual' }));
    expect((await balanceOf(h.pool, tenant, 'payer')).pendingMinor).toBe(3_500);

    const { result, ms } = await sweepOnce(tenant);
    expect(result.orphanedReleased).toBe(1);
    expect(result.orphanCandidatesExamined).toBe(2);
    const row = await readCharge(h.pool, tenant, orphan);
    expect(row?.holdState).toBe('CANCELLED');
    expect(row?.charge.failureReason).toBe(cancelReasons.holdOrphaned);
    expect((await readCharge(h.pool, tenant, waiting))?.holdState).toBe('TRIED');
    expect((await balanceOf(h.pool, tenant, 'payer')).pendingMinor).toBe(1_000);

    const client = h.clientFor({ taskQueue });
    expect(await client.getCharge(tenant, orphan)).toMatchObject({ status: 'cancelled', failureReason: 'hold_orphaned' });
    expect(await client.cancelCharge(tenant, orphan)).toMatchObject({ status: 'cancelled' });
    // The waiting hold is still its workflow's to settle.
    expect(await client.captureCharge(tenant, waiting)).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
    const payer = await balanceOf(h.pool, tenant, 'payer');
    expect([payer.postedMinor, payer.pendingMinor]).toEqual([9_000, 0]);
    await expectLedgerInvariants(h.pool, tenant);
    console.log(`sweep released ${result.orphanedReleased} orphaned hold(s), examined ${result.orphanCandidatesExamined}, in ${ms} ms`);
  });

  it('one sweep releases at most its batch size; the next sweep releases the rest', async () => {
    const tenant = await fundedTenant(h, { label: 'orphan-batch' });
    const keys = [await orphanedHold(tenant, 100), await orphanedHold(tenant, 200), await orphanedHold(tenant, 300)];
    const first = await sweepOnce(tenant, { releaseBatchSize: 1 });
    expect(first.result.orphanedReleased + first.result.expiredReleased).toBe(1);
    expect(first.result.batchFull).toBe(true);
    await waitFor(
      async () => {
        await sweepOnce(tenant, { releaseBatchSize: 1 });
        const rows = await Promise.all(keys.map((key) => readCharge(h.pool, tenant, key)));
        return rows.every((row) => row?.holdState === 'CANCELLED');
      },
      { timeoutMs: 60_000, what: 'later sweeps to release the rest' },
    );
    expect((await balanceOf(h.pool, tenant, 'payer')).pendingMinor).toBe(0);
    await expectLedgerInvariants(h.pool, tenant);
  });
});

describe('the HTTP API on an orphaned hold', () => {
  it('GET says reserved and why, capture is a 409 ChargeHoldOrphaned, cancel a 200 cancelled', async () => {
    const api = await openTestApi();
    try {
      const { tenant, apiKey } = await fundedApiTenant(api, { label: 'orphan-http' });
      const key = newKey('http');
      const created = await api.request('/v1/charges', {
        body: chargeBody({ amount: 1_500, capture: 'manual' }),
        headers: { 'idempotency-key': key },
        apiKey,
      });
      expect(created.status).toBe(201);
      expect(created.body.status).toBe('reserved');
      await h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).terminate('operator stopped it (test)');

      const path = `/v1/charges/${encodeURIComponent(key)}`;
      const got = await api.request(path, { apiKey });
      expect(got.status).toBe(200);
      expect(got.body).toMatchObject({ status: 'reserved', failure_reason: 'hold_orphaned' });
      const capture = await api.request(`${path}/capture`, { method: 'POST', apiKey });
      expect(capture.status).toBe(409);
      expect(capture.body.reason).toBe('ChargeHoldOrphaned');
      const cancel = await api.request(`${path}/cancel`, { method: 'POST', apiKey });
      expect(cancel.status).toBe(200);
      expect(cancel.body).toMatchObject({ status: 'cancelled', failure_reason: 'requested_by_caller' });
      expect((await api.request(path, { apiKey })).body.status).toBe('cancelled');
      const payer = await balanceOf(h.pool, tenant, 'payer');
      expect([payer.postedMinor, payer.pendingMinor]).toEqual([10_000, 0]);
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      await api.close();
    }
  });
});

describe('an expired hold nothing settled, and the schedule that sweeps it', () => {
  it('is counted by the overdue-holds metric, voided (hold_expired) by the scheduled sweep, and the metric drops', async () => {
    const tenant = await fundedTenant(h, { label: 'expired' });
    const key = newKey('expired');
    // A hold already past its expiry with no workflow at all: as left by a lost worker fleet.
    const intent = h.client.buildIntent(tenant, key, chargeBody({ amount: 4_000, capture: 'manual' }));
    await tryHold(h.pool, intent, -60_000);
    expect((await balanceOf(h.pool, tenant, 'payer')).pendingMinor).toBe(4_000);

    const metrics = new ApiMetrics({ defaultMetrics: false, readings: new LedgerReadings(h.pool) });
    const overdue = async () => {
      const text = await metrics.registry.metrics();
      return Number(/^chargeguard_holds_overdue (\S+)$/m.exec(text)?.[1]);
    };
    const before = await overdue();
    expect(before).toBeGreaterThanOrEqual(1);
    expect(await metrics.registry.metrics()).toMatch(/^chargeguard_holds_overdue_oldest_seconds (\d+(\.\d+)?)$/m);

    const scheduleId = `hold-sweeper-${newKey('test')}`;
    const options = { scheduleId, taskQueue, intervalMs: 60 * 60 * 1000, sweep: { ...eagerSweep, tenant } };
    expect(await ensureHoldSweeperSchedule(h.temporal, options)).toEqual({ scheduleId, created: true });
    // Idempotent: every worker start calls it; the existing schedule is kept.
    expect(await ensureHoldSweeperSchedule(h.temporal, options)).toEqual({ scheduleId, created: false });
    const schedule = h.temporal.schedule.getHandle(scheduleId);
    try {
      const triggered = Date.now();
      await schedule.trigger();
      const voided = await waitFor(
        async () => {
          const row = await readCharge(h.pool, tenant, key);
          return row?.holdState === 'CANCELLED' ? row : null;
        },
        { timeoutMs: 60_000, what: 'the scheduled sweep to void the expired hold' },
      );
      const sweepMs = Date.now() - triggered;
      expect(voided.charge.failureReason).toBe(cancelReasons.holdExpired);
      const payer = await balanceOf(h.pool, tenant, 'payer');
      expect([payer.postedMinor, payer.pendingMinor]).toEqual([10_000, 0]);
      expect(await overdue()).toBe(before - 1);
      const description = await schedule.describe();
      expect(description.info.recentActions.length).toBeGreaterThanOrEqual(1);
      await expectLedgerInvariants(h.pool, tenant);
      console.log(`scheduled sweep voided the expired hold ${sweepMs} ms after the trigger`);
    } finally {
      await schedule.delete();
    }
  });

  it('a charge with no row is never given a tombstone by a release', async () => {
    const tenant = await fundedTenant(h, { label: 'no-row' });
    const key = newKey('never-seen');
    const charge = await h.temporal.workflow.execute<(input: unknown) => Promise<Charge | null>>('ReleaseHoldWorkflow', {
      taskQueue,
      workflowId: releaseHoldWorkflowId(tenant, key),
      args: [{ tenant, idempotencyKey: key, reason: cancelReasons.requestedByCaller, activityStartToCloseMs: 10_000 }],
    });
    expect(charge).toBeNull();
    expect(await readCharge(h.pool, tenant, key)).toBeNull();
  });
});
