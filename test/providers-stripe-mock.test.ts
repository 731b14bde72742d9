/**
 * Wire compatibility: every call the Stripe connector makes, against stripe-mock (Stripe's own
 * mock, generated from Stripe's OpenAPI spec), which refuses any parameter the schema does not
 * allow. stripe-mock is stateless: answers are fixtures, so these tests check that each request is
 * accepted and each answer parses, not what it says.
 */
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { providerIdempotencyKey } from '../src/providers/connector.js';
import { startStripeMock, type StripeMock } from '../src/providers/stripe-mock.js';
import { StripeConnector, stripeApiVersion } from '../src/providers/stripe.js';

let mock: StripeMock;
let stripe: StripeConnector;
const charge = { tenant: 'tenant-a', chargeId: 'ch_wire' };

beforeAll(async () => {
  mock = await startStripeMock();
  stripe = new StripeConnector({ apiKey: 'sk_test_123', webhookSecrets: ['whsec_test'], endpoint: mock.endpoint, maxNetworkRetries: 0 });
});
afterAll(async () => {
  await mock?.stop();
});

/** stripe-mock's fixture PaymentIntent id. */
const fixturePaymentId = 'pi_123';

describe('the Stripe connector against stripe-mock', () => {
  it('authorize: PaymentIntent create with manual capture, confirm, metadata, description and return_url', async () => {
    const result = await stripe.authorize({
      reference: charge,
      amountMinor: 2_500,
      currency: 'EUR',
      paymentMethod: 'pm_card_visa',
      idempotencyKey: providerIdempotencyKey(charge.chargeId, 'authorize'),
      description: 'wire check',
      returnUrl: 'https://example.test/back',
    });
    // The fixture's status decides the outcome; what matters is that the request was accepted.
    expect(result.outcome).not.toBe('rejected');
    expect(result.outcome).not.toBe('unknown');
    if ('payment' in result && result.payment) expect(result.payment.amountMinor).toBe(2_500);
  });

  it('capture, whole and partial (amount_to_capture)', async () => {
    const whole = await stripe.capture({ paymentId: fixturePaymentId, idempotencyKey: 'ch_wire:capture' });
    const partial = await stripe.capture({ paymentId: fixturePaymentId, amountMinor: 1_000, idempotencyKey: 'ch_wire:capture-partial' });
    expect(whole.outcome).toBe('captured');
    expect(partial.outcome).toBe('captured');
  });

  it('void: PaymentIntent cancel', async () => {
    expect((await stripe.void({ paymentId: fixturePaymentId, idempotencyKey: 'ch_wire:void' })).outcome).toBe('voided');
  });

  it('refund: Refund create for a PaymentIntent', async () => {
    const result = await stripe.refund({ paymentId: fixturePaymentId, amountMinor: 500, idempotencyKey: 'ch_wire:refund:r1' });
    expect(result).toMatchObject({ outcome: 'refunded' });
  });

  it('findByReference: PaymentIntent list with created[gte] and limit, read to the end', async () => {
    const result = await stripe.findByReference({ reference: charge, createdNotBeforeMs: Date.now() - 60_000 });
    // The fixture carries no metadata of ours.
    expect(result.outcome).toBe('not_found');
  });

  it('listByWindow: PaymentIntent list with created[gte], created[lte] and limit, read to the end', async () => {
    const result = await stripe.listByWindow({ createdFromMs: Date.now() - 48 * 60 * 60_000, createdToMs: Date.now() });
    // The fixture carries no metadata of ours: listed, and none kept.
    expect(result).toMatchObject({ outcome: 'listed', payments: [] });
    expect((result as { scanned: number }).scanned).toBeGreaterThan(0);
  });

  it('stripe-mock does validate: a parameter outside the schema is refused (so the checks above mean something)', async () => {
    const raw = new Stripe('sk_test_123', { apiVersion: stripeApiVersion, maxNetworkRetries: 0, ...mock.endpoint });
    await expect(
      raw.paymentIntents.create({ amount: 100, currency: 'eur', capture_mode: 'manual' } as unknown as Stripe.PaymentIntentCreateParams),
    ).rejects.toMatchObject({ statusCode: 400, type: 'StripeInvalidRequestError' });
  });
});
