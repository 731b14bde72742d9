import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHoldSweeperActivities } from '../activities/hold-sweeper-activities.js';
import { createProviderActivities } from '../activities/provider-activities.js';
import type { Charge, ChargeIntent } from '../src/domain/charge.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { cancelReasons } from '../src/domain/refusals.js';
import { readCharge } from '../src/ledger/charges.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { chargeStatusQuery, chargeWorkflowType, type ChargePolicy, type ChargeWorkflowInput } from '../workflows/definitions.js';
import { defaultProviderStepStartToCloseMs, payerActionCaptureMarginMs, payerActionLookEveryMs } from '../workflows/provider-steps.js';
import { fundedTenant, newKey, providerIntent, startTestWorker, testPolicy, useHarness, waitFor } from './support/harness.js';

describe('payerActionCaptureMarginMs: the look before the hold expires leaves the capture its time', () => {
  it('is one attempt of the capture step when the hold is long enough: the default 7-day hold, a 10-minute one', () => {
    const sevenDaysMs = 7 * 24 * 3600 * 1000;
    expect(payerActionCaptureMarginMs(sevenDaysMs, defaultProviderStepStartToCloseMs)).toBe(defaultProviderStepStartToCloseMs);
    expect(payerActionCaptureMarginMs(600_000, 90_000)).toBe(90_000);
    expect(payerActionCaptureMarginMs(180_000, 90_000)).toBe(90_000);
  });

  it('never more than half the hold TTL, so a short hold still gives its payer most of its time', () => {
    // The chaos runs' 60 s hold with the default 90 s attempt: the look comes half-way.
    expect(payerActionCaptureMarginMs(60_000, defaultProviderStepStartToCloseMs)).toBe(30_000);
    expect(payerActionCaptureMarginMs(179_999, 90_000)).toBe(89_999);
    expect(payerActionCaptureMarginMs(3, 90_000)).toBe(1);
    expect(payerActionCaptureMarginMs(1, 90_000)).toBe(0);
    expect(payerActionCaptureMarginMs(0, 90_000)).toBe(0);
  });

  it('honours both bounds across holds and attempts: >= the attempt unless half the TTL is less, <= half the TTL, never negative', () => {
    for (const holdTtlMs of [0, 1, 2, 999, 1_000, 59_999, 60_000, 120_000, 3_600_000, 604_800_000]) {
      for (const captureAttemptMs of [0, 1, 2_000, 10_000, 90_000, 600_000]) {
        const marginMs = payerActionCaptureMarginMs(holdTtlMs, captureAttemptMs);
        expect(marginMs).toBeGreaterThanOrEqual(0);
        expect(marginMs).toBeLessThanOrEqual(holdTtlMs / 2);
        expect(marginMs).toBeGreaterThanOrEqual(Math.min(captureAttemptMs, Math.floor(holdTtlMs / 2)));
        expect(Number.isInteger(marginMs)).toBe(true);
      }
    }
  });
});

/**
 * A 3-D Secure charge whose payer authenticated and whose provider event was lost, end to end: the
 * real Temporal dev server and PostgreSQL, the Stripe SDK against the simulator. Before the margin
 * look, the last look was made at the hold's expiry, so the capture could only begin when the
 * ledger's hold had already expired; a worker down at that moment let the hold sweeper release it.
 */
const h = useHarness();
const taskQueue = `provider-payer-margin-${randomBytes(4).toString('hex')}`;
let sim: StripeSimulator;
let connector: StripeConnector;
let worker: Awaited<ReturnType<typeof startTestWorker>> | null = null;

function startWorker() {
  // The test sweeps itself, at the moment it chooses: no schedule.
  return startTestWorker({ taskQueue, pool: h.pool, providers: { stripe: connector }, holdSweeper: false });
}

beforeAll(async () => {
  // No webhook endpoint: every event the simulator emits is lost, as when the receiver answered 503
  // during a restart and the sender gave up.
  sim = await StripeSimulator.start({ port: 0 });
  connector = new StripeConnector({ apiKey: 'sk_test_chargeguard', webhookSecrets: ['whsec_test'], endpoint: sim.endpoint, maxNetworkRetries: 0, requestTimeoutMs: 2_000 });
  worker = await startWorker();
});

afterAll(async () => {
  await worker?.stop();
  await sim?.stop();
});

describe('3-D Secure, the payer authenticated, the provider event lost', () => {
  it('the look before the capture margin captures while the hold is valid: a worker down across the expiry and a sweep after it cannot cancel the charge', async () => {
    // 12 s hold, 6 s capture attempt: the margin look comes 6 s before the expiry (half the hold).
    const holdTtlMs = 12_000;
    const policy: ChargePolicy = { ...testPolicy, holdTtlMs, providerStepStartToCloseMs: 6_000, providerAuthorizeBudgetMs: 10_000 };
    const marginMs = payerActionCaptureMarginMs(holdTtlMs, policy.providerStepStartToCloseMs!);
    expect(marginMs).toBe(6_000);
    // No periodic look falls inside this hold: before the fix only the look at the expiry could find the payer.
    expect(payerActionLookEveryMs(holdTtlMs)).toBeGreaterThan(holdTtlMs);
    /** The worker is stopped this long before the expiry (well after the margin look): down across the expiry. */
    const workerDownBeforeExpiryMs = 1_500;

    const tenant = await fundedTenant(h, { label: 'pm-margin' });
    const intent: ChargeIntent = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required');
    const input: ChargeWorkflowInput = { intent, policy };
    const handle = await h.temporal.workflow.start(chargeWorkflowType, {
      taskQueue,
      workflowId: chargeWorkflowId(intent.tenant, intent.idempotencyKey),
      args: [input],
    });
    const waiting = await waitFor(async () => {
      const charge: Charge = await handle.query(chargeStatusQuery);
      return charge.status === 'requires_action' ? charge : null;
    }, { what: 'requires_action' });
    const expiresAtMs = Date.parse(waiting.holdExpiresAt!);
    const paymentId = waiting.provider!.paymentId!;

    // The payer authenticates at once; the provider's event is emitted and reaches nobody.
    sim.payments.authenticate(paymentId, true);
    expect(sim.webhooks.events.map((event) => event.type)).toContain('payment_intent.amount_capturable_updated');
    expect(sim.webhooks.deliveries).toEqual([]);

    // Until the ledger has the capture, or the expiry is near: then the worker goes down, so no look
    // at the expiry itself can run before the sweep (the chaos run's "worker down" at the expiry).
    await waitFor(async () => {
      const row = await readCharge(h.pool, tenant, intent.idempotencyKey);
      return row?.holdState === 'CONFIRMED' || Date.now() >= expiresAtMs - workerDownBeforeExpiryMs;
    }, { what: 'the capture, or the hold about to expire', timeoutMs: holdTtlMs + 10_000 });
    await worker!.stop();
    worker = null;

    // Past the ledger's expiry (its own clock), the hold sweeper's sweep as it runs once its grace has
    // passed with the capture not begun: every expired hold of the tenant released, its authorization voided.
    const sweeper = createHoldSweeperActivities(h.pool, null, createProviderActivities(h.pool, { stripe: connector }).voidAtProvider);
    await waitFor(async () => {
      const row = await readCharge(h.pool, tenant, intent.idempotencyKey);
      if (row?.holdState !== 'TRIED') return true;
      const expired = await sweeper.findExpiredHolds({ graceMs: 0, limit: 10, tenant });
      return expired.some((hold) => hold.idempotencyKey === intent.idempotencyKey);
    }, { what: 'the hold to be captured or expired by the ledger', timeoutMs: holdTtlMs + 10_000 });
    const released: boolean[] = [];
    for (const hold of await sweeper.findExpiredHolds({ graceMs: 0, limit: 10, tenant })) {
      released.push((await sweeper.releaseHold({ ...hold, reason: cancelReasons.holdExpired, onlyIfOrphaned: false })).released);
    }

    worker = await startWorker();
    const charge = (await handle.result()) as Charge;
    expect(released, 'the sweep released the hold of a payer who had authenticated').toEqual([]);
    expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
    expect(charge.provider).toMatchObject({ state: 'captured', paymentId });
    // Captured while the ledger still held the money, not after its expiry.
    expect(Date.parse(charge.updatedAt)).toBeLessThan(expiresAtMs);
    const payments = [...sim.payments.paymentIntents.values()].filter((payment) => payment.metadata['charge_id'] === intent.chargeId);
    expect(payments.map((payment) => payment.status)).toEqual(['succeeded']);
  });
});
