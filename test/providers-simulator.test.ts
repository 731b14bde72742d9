/**
 * The Stripe connector against the stateful simulator: every retry is the same request, so every
 * fault ends with one PaymentIntent per charge and one capture per PaymentIntent.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { authorizeOnce } from '../src/providers/authorize-once.js';
import {
  type AuthorizeRequest,
  type AuthorizeResult,
  type PaymentConnector,
  type PaymentReference,
  providerIdempotencyKey,
} from '../src/providers/connector.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { StripeConnector, type StripeConnectorOptions } from '../src/providers/stripe/connector.js';

/** Short, so a held request times out quickly; the simulator answers a normal request in ~1 ms. */
const testRequestTimeoutMs = 1_000;
/** A retention window short enough to cross by moving the simulator's clock. */
const testKeyRetentionMs = 60 * 60 * 1000;
const conditionTimeoutMs = 10_000;

let sim: StripeSimulator;

beforeAll(async () => {
  sim = await StripeSimulator.start({ keyRetentionMs: testKeyRetentionMs });
});
afterAll(async () => {
  await sim.stop();
});
beforeEach(() => {
  sim.faults.clear();
  sim.releaseHolds();
});

function connector(options: Partial<StripeConnectorOptions> = {}): StripeConnector {
  return new StripeConnector({
    apiKey: 'sk_test_simulator',
    webhookSecrets: ['whsec_test'],
    endpoint: sim.endpoint,
    // The connector's answer to one call, not the SDK's retries, unless a test asks for them.
    maxNetworkRetries: 0,
    requestTimeoutMs: testRequestTimeoutMs,
    keyRetentionMs: testKeyRetentionMs,
    ...options,
  });
}

function newCharge(): PaymentReference {
  return { tenant: 'tenant-a', chargeId: `ch_${randomUUID()}` };
}

function authorizeRequest(reference: PaymentReference, overrides: Partial<AuthorizeRequest> = {}): AuthorizeRequest {
  return {
    reference,
    amountMinor: 2_500,
    currency: 'EUR',
    paymentMethod: 'pm_card_visa',
    idempotencyKey: providerIdempotencyKey(reference.chargeId, 'authorize'),
    ...overrides,
  };
}

function intentsOf(reference: PaymentReference) {
  return [...sim.payments.paymentIntents.values()].filter((intent) => intent.metadata['charge_id'] === reference.chargeId);
}

function requestsWithKey(key: string) {
  return sim.requests.filter((request) => request.idempotencyKey === key);
}

/** The caller's loop: the same request until the answer is not `unknown`, bounded. */
async function untilKnown<T extends { outcome: string }>(call: () => Promise<T>, maxAttempts = 5): Promise<T> {
  let result = await call();
  for (let attempt = 1; attempt < maxAttempts && result.outcome === 'unknown'; attempt++) result = await call();
  return result;
}

function paymentIdOf(result: AuthorizeResult): string {
  if (result.outcome !== 'authorized') throw new Error(`expected authorized, got ${JSON.stringify(result)}`);
  return result.payment.id;
}

describe('idempotent replays', () => {
  it('the same key and parameters get the saved answer: one PaymentIntent', async () => {
    const stripe = connector();
    const charge = newCharge();
    const first = await stripe.authorize(authorizeRequest(charge));
    const second = await stripe.authorize(authorizeRequest(charge));
    expect(paymentIdOf(second)).toBe(paymentIdOf(first));
    expect(intentsOf(charge)).toHaveLength(1);
    expect(requestsWithKey(providerIdempotencyKey(charge.chargeId, 'authorize')).map((r) => r.replayed)).toEqual([false, true]);
  });

  it('the same key with other parameters is a final idempotency_mismatch, and nothing new is created', async () => {
    const stripe = connector();
    const charge = newCharge();
    const first = await stripe.authorize(authorizeRequest(charge));
    const other = await stripe.authorize(authorizeRequest(charge, { amountMinor: 2_501 }));
    expect(other).toMatchObject({ outcome: 'rejected', reason: 'idempotency_mismatch' });
    expect(intentsOf(charge).map((intent) => intent.id)).toEqual([paymentIdOf(first)]);
  });

  it('a saved decline is replayed as the same decline', async () => {
    const stripe = connector();
    const charge = newCharge();
    const request = authorizeRequest(charge, { paymentMethod: 'pm_card_visa_chargeDeclinedInsufficientFunds' });
    const first = await stripe.authorize(request);
    const again = await stripe.authorize(request);
    expect(first).toMatchObject({ outcome: 'declined', declineCode: 'insufficient_funds' });
    expect(again).toEqual(first);
    expect(intentsOf(charge)).toHaveLength(1);
  });
});

describe('unknown outcomes are retried with the same key', () => {
  it('answer lost after commit (connection dropped): the retry returns the same PaymentIntent, never two', async () => {
    const stripe = connector();
    const charge = newCharge();
    // Twice: the SDK itself retries a reset connection once, even with retries off.
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'drop_after_commit' }, times: 2 });
    const lost = await stripe.authorize(authorizeRequest(charge));
    expect(lost).toMatchObject({ outcome: 'unknown', reason: 'connection_lost' });
    expect(intentsOf(charge)).toHaveLength(1);
    const retried = await stripe.authorize(authorizeRequest(charge));
    expect(paymentIdOf(retried)).toBe(intentsOf(charge)[0]!.id);
    expect(intentsOf(charge)).toHaveLength(1);
    expect(requestsWithKey(providerIdempotencyKey(charge.chargeId, 'authorize')).map((r) => r.status)).toEqual(['dropped', 'dropped', 200]);
  });

  it('a 5xx after commit is unknown; the retry replays the saved PaymentIntent', async () => {
    const stripe = connector();
    const charge = newCharge();
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'error_after_commit', status: 500 } });
    expect(await stripe.authorize(authorizeRequest(charge))).toMatchObject({ outcome: 'unknown', reason: 'server_error' });
    const retried = await stripe.authorize(authorizeRequest(charge));
    expect(paymentIdOf(retried)).toBe(intentsOf(charge)[0]!.id);
    expect(intentsOf(charge)).toHaveLength(1);
  });

  it('a 5xx before commit is unknown and leaves nothing; the retry creates the one PaymentIntent', async () => {
    const stripe = connector();
    const charge = newCharge();
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'error_before_commit', status: 503 } });
    expect(await stripe.authorize(authorizeRequest(charge))).toMatchObject({ outcome: 'unknown', reason: 'server_error' });
    expect(intentsOf(charge)).toHaveLength(0);
    await stripe.authorize(authorizeRequest(charge));
    expect(intentsOf(charge)).toHaveLength(1);
  });

  it('429 is unknown (rate_limited); the retry goes through', async () => {
    const stripe = connector();
    const charge = newCharge();
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'rate_limit' } });
    expect(await stripe.authorize(authorizeRequest(charge))).toMatchObject({ outcome: 'unknown', reason: 'rate_limited' });
    expect((await stripe.authorize(authorizeRequest(charge))).outcome).toBe('authorized');
    expect(intentsOf(charge)).toHaveLength(1);
  });

  it('a timeout while the answer is held after commit: the retry gets the saved answer', async () => {
    const stripe = connector();
    const charge = newCharge();
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'hold_after_commit' } });
    expect(await stripe.authorize(authorizeRequest(charge))).toMatchObject({ outcome: 'unknown', reason: 'timeout' });
    sim.releaseHolds();
    const retried = await stripe.authorize(authorizeRequest(charge));
    expect(paymentIdOf(retried)).toBe(intentsOf(charge)[0]!.id);
    expect(intentsOf(charge)).toHaveLength(1);
  });

  it('409 idempotency_key_in_use while the first request is in flight; retried with the same key it gets the one PaymentIntent', async () => {
    const stripe = connector();
    const charge = newCharge();
    const key = providerIdempotencyKey(charge.chargeId, 'authorize');
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'hold_before_commit' } });
    // The first attempt times out while its request waits, key in flight, before it commits.
    expect(await stripe.authorize(authorizeRequest(charge))).toMatchObject({ outcome: 'unknown', reason: 'timeout' });
    const inUse = await stripe.authorize(authorizeRequest(charge));
    expect(inUse).toMatchObject({ outcome: 'unknown', reason: 'key_in_use' });
    expect(intentsOf(charge)).toHaveLength(0);
    sim.releaseHolds();
    await vi.waitFor(() => expect(intentsOf(charge)).toHaveLength(1), { timeout: conditionTimeoutMs });
    const retried = await stripe.authorize(authorizeRequest(charge));
    expect(paymentIdOf(retried)).toBe(intentsOf(charge)[0]!.id);
    expect(requestsWithKey(key).map((r) => r.status)).toEqual([409, 200, 200]);
  });

  it("the SDK's own retries absorb a 409 with the same key", async () => {
    const patient = connector({ maxNetworkRetries: 3, requestTimeoutMs: 10_000 });
    const charge = newCharge();
    const key = providerIdempotencyKey(charge.chargeId, 'authorize');
    // Released by the test once the second caller has seen its 409.
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'hold_before_commit' } });
    const first = connector({ requestTimeoutMs: 10_000 }).authorize(authorizeRequest(charge));
    await vi.waitFor(() => expect(sim.faults.held).toBe(1), { timeout: conditionTimeoutMs });
    const second = patient.authorize(authorizeRequest(charge));
    await vi.waitFor(() => expect(requestsWithKey(key).some((r) => r.status === 409)).toBe(true), { timeout: conditionTimeoutMs });
    sim.releaseHolds();
    const [a, b] = await Promise.all([first, second]);
    expect(paymentIdOf(b)).toBe(paymentIdOf(a));
    expect(intentsOf(charge)).toHaveLength(1);
    expect(requestsWithKey(key).every((r) => r.idempotencyKey === key)).toBe(true);
  });

  it('the same authorize key sent 5 times at once: one PaymentIntent, every caller told the same', async () => {
    const charge = newCharge();
    const key = providerIdempotencyKey(charge.chargeId, 'authorize');
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'hold_before_commit' } });
    const callers = Array.from({ length: 5 }, () => connector({ requestTimeoutMs: 10_000 }));
    const firstAnswers = callers.map((stripe) => stripe.authorize(authorizeRequest(charge)));
    // One holds the key; the other four are told it is in use.
    await vi.waitFor(() => expect(requestsWithKey(key).filter((r) => r.status === 409)).toHaveLength(4), { timeout: conditionTimeoutMs });
    sim.releaseHolds();
    const answers = await Promise.all(
      firstAnswers.map(async (answer, i) => {
        const first = await answer;
        return first.outcome === 'unknown' ? untilKnown(() => callers[i]!.authorize(authorizeRequest(charge))) : first;
      }),
    );
    const ids = new Set(answers.map(paymentIdOf));
    expect(ids.size).toBe(1);
    expect(intentsOf(charge)).toHaveLength(1);
  });

  it('5 at once with no fault and the SDK retrying: still one PaymentIntent', async () => {
    const charge = newCharge();
    const answers = await Promise.all(Array.from({ length: 5 }, () => connector({ maxNetworkRetries: 2 }).authorize(authorizeRequest(charge))));
    expect(new Set(answers.map(paymentIdOf)).size).toBe(1);
    expect(intentsOf(charge)).toHaveLength(1);
  });
});

describe('key retention', () => {
  it('after the provider pruned the key, findByReference finds the payment before anything new is created', async () => {
    const stripe = connector();
    const charge = newCharge();
    const chargeCreatedAtMs = sim.nowMs();
    const firstSentAtMs = sim.nowMs();
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'drop_after_commit' }, times: 2 });
    expect((await stripe.authorize(authorizeRequest(charge))).outcome).toBe('unknown');
    sim.advanceClock(testKeyRetentionMs + 1);
    expect(sim.keys.size).toBe(0);

    const creates = (): number => sim.requests.filter((r) => r.operation === 'create_payment_intent' && r.idempotencyKey === authorizeRequest(charge).idempotencyKey).length;
    const createsBefore = creates();
    const result = await authorizeOnce(stripe, authorizeRequest(charge), { firstSentAtMs, nowMs: sim.nowMs(), chargeCreatedAtMs });
    expect(paymentIdOf(result)).toBe(intentsOf(charge)[0]!.id);
    expect(creates()).toBe(createsBefore);
    expect(intentsOf(charge)).toHaveLength(1);
  });

  it('without the lookup, the same key after retention creates a second PaymentIntent (why the rule exists)', async () => {
    const stripe = connector();
    const charge = newCharge();
    await stripe.authorize(authorizeRequest(charge));
    sim.advanceClock(testKeyRetentionMs + 1);
    await stripe.authorize(authorizeRequest(charge));
    expect(intentsOf(charge)).toHaveLength(2);
    // And the lookup reports both, oldest first, so the duplicate can be voided.
    const found = await stripe.findByReference({ reference: charge, createdNotBeforeMs: sim.nowMs() - 2 * testKeyRetentionMs });
    expect(found.outcome === 'found' && found.payments.length).toBe(2);
  });

  it('within retention, authorizeOnce just retries the key (no lookup)', async () => {
    const stripe = connector();
    const charge = newCharge();
    const listsBefore = sim.requests.filter((r) => r.operation === 'list_payment_intents').length;
    const result = await authorizeOnce(stripe, authorizeRequest(charge), { firstSentAtMs: sim.nowMs(), nowMs: sim.nowMs(), chargeCreatedAtMs: sim.nowMs() });
    expect(result.outcome).toBe('authorized');
    expect(sim.requests.filter((r) => r.operation === 'list_payment_intents').length).toBe(listsBefore);
  });

  it('findByReference reads the consistent list: a payment created a moment ago is found, while search does not see it yet', async () => {
    const stripe = connector();
    const charge = newCharge();
    const created = paymentIdOf(await stripe.authorize(authorizeRequest(charge)));
    const found = await stripe.findByReference({ reference: charge, createdNotBeforeMs: sim.nowMs() });
    expect(found).toMatchObject({ outcome: 'found', payments: [{ id: created, reference: charge }] });
    const searchUrl = `${sim.url}/v1/payment_intents/search?query=${encodeURIComponent(`metadata['charge_id']:'${charge.chargeId}'`)}`;
    const search = async (): Promise<unknown[]> =>
      ((await (await fetch(searchUrl, { headers: { authorization: 'Bearer sk_test_simulator' } })).json()) as { data: unknown[] }).data;
    expect(await search()).toHaveLength(0);
    sim.advanceClock(60_000);
    expect(await search()).toHaveLength(1);
  });
});

describe('capture, void, refund', () => {
  async function authorized(stripe: PaymentConnector, charge = newCharge()): Promise<{ charge: PaymentReference; paymentId: string }> {
    return { charge, paymentId: paymentIdOf(await stripe.authorize(authorizeRequest(charge))) };
  }

  it('capture twice with the same key: one capture; with another key: already_captured, amount unchanged', async () => {
    const stripe = connector();
    const { charge, paymentId } = await authorized(stripe);
    const key = providerIdempotencyKey(charge.chargeId, 'capture');
    const first = await stripe.capture({ paymentId, amountMinor: 1_000, idempotencyKey: key });
    const second = await stripe.capture({ paymentId, amountMinor: 1_000, idempotencyKey: key });
    expect(first).toMatchObject({ outcome: 'captured', payment: { amountCapturedMinor: 1_000, state: 'captured' } });
    expect(second).toEqual(first);
    const stray = await stripe.capture({ paymentId, idempotencyKey: `${key}:stray` });
    expect(stray).toMatchObject({ outcome: 'already_captured', payment: { amountCapturedMinor: 1_000 } });
    expect(sim.payments.paymentIntents.get(paymentId)!.amountReceived).toBe(1_000);
  });

  it('capture whose answer is lost is retried with its key: captured once', async () => {
    const stripe = connector();
    const { charge, paymentId } = await authorized(stripe);
    sim.addFault({ operation: 'capture_payment_intent', fault: { kind: 'drop_after_commit' }, times: 2 });
    const request = { paymentId, idempotencyKey: providerIdempotencyKey(charge.chargeId, 'capture') };
    expect((await stripe.capture(request)).outcome).toBe('unknown');
    expect(await stripe.capture(request)).toMatchObject({ outcome: 'captured', payment: { amountCapturedMinor: 2_500 } });
  });

  it('capture of more than authorized is a final invalid_request', async () => {
    const stripe = connector();
    const { charge, paymentId } = await authorized(stripe);
    const result = await stripe.capture({ paymentId, amountMinor: 2_501, idempotencyKey: providerIdempotencyKey(charge.chargeId, 'capture') });
    expect(result).toMatchObject({ outcome: 'rejected', reason: 'invalid_request', code: 'amount_too_large' });
  });

  it('void before authorize: nothing to void; the caller records it, authorizes no more, and voids a late arrival: nothing is ever captured', async () => {
    const stripe = connector();
    const charge = newCharge();
    // The caller's durable record (the ledger's anti-hanging rule, at the provider): once voided, never authorize.
    const voided = new Set<string>();
    // An authorize is already on its way and lands after the void looked.
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'hold_before_commit' } });
    const late = connector({ requestTimeoutMs: 10_000 }).authorize(authorizeRequest(charge));
    await vi.waitFor(() => expect(sim.faults.held).toBe(1), { timeout: conditionTimeoutMs });

    voided.add(charge.chargeId);
    const lookup = await stripe.findByReference({ reference: charge, createdNotBeforeMs: sim.nowMs() });
    expect(lookup.outcome).toBe('not_found');

    sim.releaseHolds();
    await late;
    // Reconciliation: a voided charge with a payment at the provider gets that payment voided.
    const found = await stripe.findByReference({ reference: charge, createdNotBeforeMs: sim.nowMs() - 60_000 });
    expect(found.outcome).toBe('found');
    const paymentId = found.outcome === 'found' ? found.payments[0].id : '';
    expect(voided.has(charge.chargeId)).toBe(true);
    expect(await stripe.void({ paymentId, idempotencyKey: providerIdempotencyKey(charge.chargeId, 'void') })).toMatchObject({ outcome: 'voided' });
    const capture = await stripe.capture({ paymentId, idempotencyKey: providerIdempotencyKey(charge.chargeId, 'capture') });
    expect(capture).toMatchObject({ outcome: 'rejected', reason: 'state_conflict' });
    expect(sim.payments.paymentIntents.get(paymentId)).toMatchObject({ status: 'canceled', amountReceived: 0 });
  });

  it('refund with its key twice: one refund; more than captured is refused', async () => {
    const stripe = connector();
    const { charge, paymentId } = await authorized(stripe);
    await stripe.capture({ paymentId, idempotencyKey: providerIdempotencyKey(charge.chargeId, 'capture') });
    const request = { paymentId, amountMinor: 1_000, idempotencyKey: providerIdempotencyKey(charge.chargeId, 'refund:r1') };
    const first = await stripe.refund(request);
    const again = await stripe.refund(request);
    expect(first).toMatchObject({ outcome: 'refunded', refund: { amountMinor: 1_000, providerStatus: 'succeeded' } });
    expect(again).toEqual(first);
    expect([...sim.payments.refunds.values()].filter((refund) => refund.paymentIntent === paymentId)).toHaveLength(1);
    const tooMuch = await stripe.refund({ paymentId, amountMinor: 1_501, idempotencyKey: providerIdempotencyKey(charge.chargeId, 'refund:r2') });
    expect(tooMuch).toMatchObject({ outcome: 'rejected', reason: 'invalid_request', code: 'amount_too_large' });
  });
});

describe('declines and authentication', () => {
  it.each([
    ['pm_card_visa_chargeDeclined', 'generic_decline', 'account_frozen'],
    ['pm_card_visa_chargeDeclinedInsufficientFunds', 'insufficient_funds', 'insufficient_funds'],
    ['pm_card_visa_chargeDeclinedLostCard', 'lost_card', 'account_frozen'],
    ['pm_card_visa_chargeDeclinedStolenCard', 'stolen_card', 'account_frozen'],
    ['pm_card_visa_chargeDeclinedVelocityLimitExceeded', 'card_velocity_exceeded', 'insufficient_funds'],
    ['pm_card_chargeDeclinedFraudulent', 'fraudulent', 'account_frozen'],
    ['pm_card_chargeDeclinedExpiredCard', 'expired_card', 'account_frozen'],
    ['pm_card_chargeDeclinedIncorrectCvc', 'incorrect_cvc', 'account_frozen'],
    ['pm_card_chargeDeclinedProcessingError', 'processing_error', 'account_frozen'],
  ])('%s is declined as %s, mapped to %s', async (paymentMethod, providerDeclineCode, declineCode) => {
    const charge = newCharge();
    const result = await connector().authorize(authorizeRequest(charge, { paymentMethod }));
    expect(result).toMatchObject({ outcome: 'declined', providerDeclineCode, declineCode, payment: { state: 'declined', reference: charge } });
    expect(result.outcome === 'declined' && result.transient).toBe(providerDeclineCode === 'processing_error');
  });

  it('a payment method Stripe does not know is a final not_found', async () => {
    const result = await connector().authorize(authorizeRequest(newCharge(), { paymentMethod: 'pm_card_nonexistent' }));
    expect(result).toMatchObject({ outcome: 'rejected', reason: 'not_found', code: 'resource_missing' });
  });

  it('3-D Secure: requires_action carries next_action; once the payer passes, the payment is authorized', async () => {
    const stripe = connector();
    const charge = newCharge();
    const result = await stripe.authorize(authorizeRequest(charge, { paymentMethod: 'pm_card_threeDSecure2Required' }));
    expect(result).toMatchObject({ outcome: 'requires_action', nextAction: { type: 'use_stripe_sdk' } });
    const redirect = await stripe.authorize(authorizeRequest(newCharge(), { paymentMethod: 'pm_card_threeDSecure2Required', returnUrl: 'https://example.test/back' }));
    expect(redirect).toMatchObject({ outcome: 'requires_action', nextAction: { type: 'redirect_to_url', redirect_to_url: { return_url: 'https://example.test/back' } } });

    const paymentId = result.outcome === 'requires_action' ? result.payment.id : '';
    const response = await fetch(`${sim.url}/_simulator/payment_intents/${paymentId}/authenticate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outcome: 'succeed' }),
    });
    expect(response.status).toBe(200);
    const found = await stripe.findByReference({ reference: charge, createdNotBeforeMs: sim.nowMs() - 60_000 });
    expect(found).toMatchObject({ outcome: 'found', payments: [{ id: paymentId, state: 'authorized', amountCapturableMinor: 2_500 }] });
  });
});

describe('final errors and the control API', () => {
  it('a wrong API key is a final authentication refusal', async () => {
    const result = await connector({ apiKey: 'sk_live_wrong' }).authorize(authorizeRequest(newCharge()));
    expect(result).toMatchObject({ outcome: 'rejected', reason: 'authentication' });
  });

  it('a fault with a bad field is refused with a 400 naming it', async () => {
    const response = await fetch(`${sim.url}/_simulator/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ fault: { kind: 'error_after_commit', status: 418 } }),
    });
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ error: { field: 'fault.status' } });
    expect(sim.faults.pending).toBe(0);
  });

  it('faults armed over HTTP strike the next matching request', async () => {
    const response = await fetch(`${sim.url}/_simulator/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ operation: 'create_payment_intent', fault: { kind: 'error_before_commit' } }),
    });
    expect(response.status).toBe(201);
    expect(await connector().authorize(authorizeRequest(newCharge()))).toMatchObject({ outcome: 'unknown', reason: 'server_error' });
  });
});
