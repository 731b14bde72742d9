/**
 * Wire compatibility: every call the Stripe connector makes, against stripe-mock (Stripe's own
 * mock, generated from Stripe's OpenAPI spec), which refuses any parameter the schema does not
 * allow. stripe-mock is stateless: answers are fixtures, so these tests check that each request is
 * accepted and each answer parses, not what it says.
 */
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { providerIdempotencyKey } from '../src/providers/connector.js';
import { startStripeMock, type StripeMock } from '../src/providers/stripe/stripe-mock.js';
import { StripeConnector, stripeApiVersion } from '../src/providers/stripe/connector.js';

let mock: StripeMock;
let stripe: StripeConnector;
const charge = { tenant: 'tenant-a', chargeId: 'ch_wire' };

/** One request as it went over the wire to stripe-mock, and stripe-mock's answer. */
interface WireExchange {
  method: string;
  path: string;
  /** The form-encoded body, decoded: what Stripe would read. */
  params: URLSearchParams;
  status: number;
}

/**
 * A loopback relay between the connector and stripe-mock that keeps every request's body: the SDK
 * encodes parameters itself, so this is the one place to see which of them reach the wire (and
 * stripe-mock's status says whether Stripe's schema accepts them).
 */
let relay: Server;
const exchanges: WireExchange[] = [];

async function startRelay(target: { host: string; port: number }): Promise<{ host: string; port: number; protocol: 'http' }> {
  relay = createServer((incoming, outgoing) => {
    const chunks: Buffer[] = [];
    incoming.on('data', (chunk: Buffer) => chunks.push(chunk));
    incoming.on('end', () => {
      const body = Buffer.concat(chunks);
      const forward = httpRequest(
        { host: target.host, port: target.port, method: incoming.method, path: incoming.url, headers: incoming.headers },
        (answer) => {
          exchanges.push({ method: incoming.method ?? '', path: incoming.url ?? '', params: new URLSearchParams(body.toString('utf8')), status: answer.statusCode ?? 0 });
          outgoing.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(outgoing);
        },
      );
      forward.on('error', (error) => outgoing.destroy(error));
      forward.end(body);
    });
  });
  await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
  return { host: '127.0.0.1', port: (relay.address() as AddressInfo).port, protocol: 'http' };
}

beforeAll(async () => {
  mock = await startStripeMock();
  const endpoint = await startRelay(mock.endpoint);
  stripe = new StripeConnector({ apiKey: 'sk_test_123', webhookSecrets: ['whsec_test'], endpoint, maxNetworkRetries: 0 });
});
afterAll(async () => {
  await new Promise<void>((resolve) => (relay ? relay.close(() => resolve()) : resolve()));
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
    // On the wire, accepted by Stripe's schema: a server-side confirm with manual capture and the
    // caller's return URL as given, so a payer who must authenticate gets redirect_to_url.
    const create = exchanges.filter((exchange) => exchange.method === 'POST' && exchange.path === '/v1/payment_intents').at(-1)!;
    expect(create.status).toBe(200);
    expect(Object.fromEntries(create.params)).toMatchObject({
      amount: '2500',
      currency: 'eur',
      payment_method: 'pm_card_visa',
      capture_method: 'manual',
      confirm: 'true',
      return_url: 'https://example.test/back',
      'allowed_payment_method_types[0]': 'card',
      'metadata[tenant]': 'tenant-a',
      'metadata[charge_id]': 'ch_wire',
      description: 'wire check',
    });
  });

  it('authorize without a return URL sends none (the provider then answers use_stripe_sdk)', async () => {
    const result = await stripe.authorize({
      reference: charge,
      amountMinor: 700,
      currency: 'USD',
      paymentMethod: 'pm_card_visa',
      idempotencyKey: providerIdempotencyKey('ch_wire_plain', 'authorize'),
    });
    expect(result.outcome).not.toBe('rejected');
    const create = exchanges.filter((exchange) => exchange.method === 'POST' && exchange.path === '/v1/payment_intents').at(-1)!;
    expect(create.status).toBe(200);
    expect(create.params.get('amount')).toBe('700');
    expect(create.params.has('return_url')).toBe(false);
    expect(create.params.get('confirm')).toBe('true');
  });

  it('stripe-mock refuses a return_url that is not a string of its schema, so the check above is a check', async () => {
    const raw = new Stripe('sk_test_123', { apiVersion: stripeApiVersion, maxNetworkRetries: 0, ...mock.endpoint });
    await expect(
      raw.paymentIntents.create({ amount: 100, currency: 'eur', confirm: true, return_url: { nested: 'x' } } as unknown as Stripe.PaymentIntentCreateParams),
    ).rejects.toMatchObject({ statusCode: 400 });
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
