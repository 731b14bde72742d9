import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { patchMarkers } from '../scripts/workflow-histories.js';
import type { Charge, ChargeIntent } from '../src/domain/charge.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { readCharge } from '../src/ledger/charges.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import {
  captureChargeUpdate,
  chargeStatusQuery,
  chargeWorkflowType,
  type ChargePolicy,
  type ChargeWorkflowInput,
} from '../workflows/definitions.js';
import { providerCaptureMarginPatch } from '../workflows/patches.js';
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
 * 3-D Secure charges whose payer authenticated and whose provider event was lost, end to end: the
 * real Temporal dev server and PostgreSQL, the Stripe SDK against the simulator (no webhook endpoint,
 * so every event it emits reaches nobody, as when the receiver answered 503 during a restart and the
 * sender gave up). Before the margin look, only the look at the hold's expiry could find such a
 * payer: a manual hold then had no time left for its capture and was released `hold_expired`, its
 * authorization voided; an automatic one was captured only after its hold's time was up.
 */
const h = useHarness();
const taskQueue = `provider-payer-margin-${randomBytes(4).toString('hex')}`;
let sim: StripeSimulator;
let worker: Awaited<ReturnType<typeof startTestWorker>> | undefined;

beforeAll(async () => {
  sim = await StripeSimulator.start({ port: 0 });
  const stripe = new StripeConnector({ apiKey: 'sk_test_chargeguard', webhookSecrets: ['whsec_test'], endpoint: sim.endpoint, maxNetworkRetries: 0, requestTimeoutMs: 2_000 });
  worker = await startTestWorker({ taskQueue, pool: h.pool, providers: { stripe }, holdSweeper: false });
});

afterAll(async () => {
  await worker?.stop();
  await sim?.stop();
});

// A 10 s hold and 4 s provider attempts: the margin look comes 4 s before the hold expires.
const holdTtlMs = 10_000;
const policy: ChargePolicy = { ...testPolicy, holdTtlMs, providerStepStartToCloseMs: 4_000, providerAuthorizeBudgetMs: 8_000 };

function start(intent: ChargeIntent) {
  const input: ChargeWorkflowInput = { intent, policy };
  return h.temporal.workflow.start(chargeWorkflowType, {
    taskQueue,
    workflowId: chargeWorkflowId(intent.tenant, intent.idempotencyKey),
    args: [input],
  });
}

/** The charge once it waits for its payer; the payer then authenticates, and the provider's event is lost. */
async function payerAuthenticatesEventLost(handle: Awaited<ReturnType<typeof start>>): Promise<Charge> {
  const waiting = await waitFor(async () => {
    const charge: Charge = await handle.query(chargeStatusQuery);
    return charge.status === 'requires_action' ? charge : null;
  }, { what: 'requires_action' });
  const paymentId = waiting.provider!.paymentId!;
  // As the bank's page does when the payer completes 3-D Secure.
  const response = await fetch(`${sim.url}/_simulator/payment_intents/${paymentId}/authenticate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ outcome: 'succeed' }),
  });
  expect(response.status).toBe(200);
  expect(sim.webhooks.events.map((event) => event.type)).toContain('payment_intent.amount_capturable_updated');
  expect(sim.webhooks.deliveries, 'no event may reach the charge').toEqual([]);
  return waiting;
}

function paymentStatuses(intent: ChargeIntent): string[] {
  return [...sim.payments.paymentIntents.values()]
    .filter((payment) => payment.metadata['tenant'] === intent.tenant && payment.metadata['charge_id'] === intent.chargeId)
    .map((payment) => payment.status);
}

describe('3-D Secure, the payer authenticated, the provider event lost', () => {
  it('the margin look checks the bounds it is given: no periodic look falls inside this hold', () => {
    expect(payerActionCaptureMarginMs(holdTtlMs, policy.providerStepStartToCloseMs!)).toBe(4_000);
    // Without the margin look, only the look at the expiry could find the payer.
    expect(payerActionLookEveryMs(holdTtlMs)).toBeGreaterThan(holdTtlMs);
  });

  it('manual capture: the look before the margin finds the authorization while the hold is valid; the caller captures and the charge succeeds, not hold_expired', async () => {
    const tenant = await fundedTenant(h, { label: 'pm-manual' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required', { captureMode: 'manual' });
    const handle = await start(intent);
    await payerAuthenticatesEventLost(handle);
    const held = await readCharge(h.pool, tenant, intent.idempotencyKey);
    const expiresAtMs = Date.parse(held?.charge.holdExpiresAt ?? '');
    expect(Number.isFinite(expiresAtMs), 'a manual hold has its expiry in the ledger').toBe(true);

    // The caller polls as the docs say until the charge is held (or decided), then captures it.
    const seen = await waitFor(async () => {
      const charge: Charge = await handle.query(chargeStatusQuery);
      return charge.status === 'requires_action' ? null : charge;
    }, { what: 'the charge to leave requires_action', timeoutMs: holdTtlMs + 20_000 });
    const seenAtMs = Date.now();
    const captured = seen.status === 'reserved' ? await handle.executeUpdate(captureChargeUpdate, { args: [{ amountMinor: null }] }).catch((error: unknown) => error) : null;
    const charge = (await handle.result()) as Charge;
    expect(charge, 'the payer authenticated in time: the charge must not be released').toMatchObject({
      status: 'succeeded',
      amountCapturedMinor: 1_000,
      failureReason: null,
      provider: { state: 'captured' },
    });
    expect(captured).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
    expect(seen).toMatchObject({ status: 'reserved', provider: { state: 'authorized' } });
    expect(seenAtMs, 'found authorized while the hold was valid').toBeLessThan(expiresAtMs);
    expect(Date.parse(charge.updatedAt), 'captured while the ledger still held the money').toBeLessThan(expiresAtMs);
    expect(paymentStatuses(intent)).toEqual(['succeeded']);
  });

  it('automatic capture: captured before the hold expires, by the margin look, with one timer in its history', async () => {
    const tenant = await fundedTenant(h, { label: 'pm-auto' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required');
    const handle = await start(intent);
    await payerAuthenticatesEventLost(handle);
    const charge = (await handle.result()) as Charge;
    expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
    // An automatic hold's expiry is the workflow's (Try's time plus the TTL): the ledger records none.
    const expiresAtMs = Date.parse(charge.createdAt) + holdTtlMs;
    expect(Date.parse(charge.updatedAt), 'captured before the hold expired').toBeLessThan(expiresAtMs);
    expect(paymentStatuses(intent)).toEqual(['succeeded']);
    const history = await handle.fetchHistory();
    expect(patchMarkers(history)).toContain(providerCaptureMarginPatch);
    // The margin look's timer; the look found the payer, so no timer for the expiry.
    expect((history.events ?? []).filter((event) => event.timerStartedEventAttributes)).toHaveLength(1);
  });

  it('a card charge that never waits for its payer carries no margin marker and starts no timer', async () => {
    const tenant = await fundedTenant(h, { label: 'pm-plain' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa');
    const handle = await start(intent);
    expect(await handle.result()).toMatchObject({ status: 'succeeded' });
    const history = await handle.fetchHistory();
    expect(patchMarkers(history)).not.toContain(providerCaptureMarginPatch);
    expect((history.events ?? []).filter((event) => event.timerStartedEventAttributes)).toEqual([]);
  });
});
