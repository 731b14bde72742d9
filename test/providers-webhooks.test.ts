/**
 * Webhooks: the simulator signs events exactly as Stripe does (`t=…,v1=…`, HMAC-SHA256 over
 * `<t>.<body>`), the connector verifies them with the SDK (tolerance, several secrets for rotation),
 * and delivery can be late, doubled and out of order.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { providerIdempotencyKey } from '../src/providers/connector.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { stripeSignatureHeader } from '../src/providers/stripe/simulator/webhooks.js';
import { StripeConnector, stripeWebhookToleranceMs } from '../src/providers/stripe/connector.js';

const oldSecret = 'whsec_old_secret';
const newSecret = 'whsec_new_secret';
const conditionTimeoutMs = 10_000;

interface Received {
  body: string;
  signature: string;
  atMs: number;
}

let sim: StripeSimulator;
let receiver: FastifyInstance;
let receiverUrl: string;
let received: Received[] = [];

beforeAll(async () => {
  sim = await StripeSimulator.start();
  receiver = Fastify({ logger: false });
  // The raw body: the signature covers the bytes as sent.
  receiver.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, body, done) => done(null, body));
  receiver.post('/webhooks', (request, reply) => {
    received.push({ body: request.body as string, signature: String(request.headers['stripe-signature']), atMs: Date.now() });
    return reply.code(200).send({ received: true });
  });
  receiverUrl = `${await receiver.listen({ host: '127.0.0.1', port: 0 })}/webhooks`;
});
afterAll(async () => {
  await sim.stop();
  await receiver.close();
});
beforeEach(() => {
  received = [];
});

function connector(secrets: string[]): StripeConnector {
  return new StripeConnector({ apiKey: 'sk_test_hooks', webhookSecrets: secrets, endpoint: sim.endpoint, maxNetworkRetries: 0 });
}

async function authorizeOne(chargeId: string): Promise<string> {
  const result = await connector([newSecret]).authorize({
    reference: { tenant: 'tenant-w', chargeId },
    amountMinor: 700,
    currency: 'USD',
    paymentMethod: 'pm_card_visa',
    idempotencyKey: providerIdempotencyKey(chargeId, 'authorize'),
  });
  if (result.outcome !== 'authorized') throw new Error(JSON.stringify(result));
  return result.payment.id;
}

describe('webhook signatures', () => {
  it('an event delivered by the simulator verifies, and carries the payment in our words', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret] });
    const paymentId = await authorizeOne('ch_hook_1');
    await vi.waitFor(() => expect(received.length).toBeGreaterThanOrEqual(2), { timeout: conditionTimeoutMs });
    const results = received.map((r) => connector([newSecret]).verifyWebhook({ payload: r.body, signatureHeader: r.signature }));
    expect(results.map((r) => r.outcome)).toEqual(['verified', 'verified']);
    const types = results.map((r) => (r.outcome === 'verified' ? r.event.type : ''));
    expect(types).toEqual(['payment_intent.created', 'payment_intent.amount_capturable_updated']);
    const last = results[1]!;
    expect(last.outcome === 'verified' && last.event.payment).toMatchObject({ id: paymentId, state: 'authorized', reference: { chargeId: 'ch_hook_1' } });
  });

  it('the wrong secret is refused as bad_signature; a tampered body too', async () => {
    const payload = JSON.stringify({ id: 'evt_1', object: 'event', type: 'payment_intent.created', created: 1, data: { object: {} } });
    const header = stripeSignatureHeader(payload, [newSecret], Math.floor(Date.now() / 1000));
    expect(connector([oldSecret]).verifyWebhook({ payload, signatureHeader: header })).toMatchObject({ outcome: 'refused', reason: 'bad_signature' });
    expect(connector([newSecret]).verifyWebhook({ payload: payload.replace('evt_1', 'evt_2'), signatureHeader: header })).toMatchObject({
      outcome: 'refused',
      reason: 'bad_signature',
    });
    expect(connector([newSecret]).verifyWebhook({ payload, signatureHeader: header }).outcome).toBe('verified');
  });

  it('an event signed longer ago than the tolerance is refused as too_old (a replay), one inside it is accepted', async () => {
    const payload = JSON.stringify({ id: 'evt_old', object: 'event', type: 'payment_intent.created', created: 1, data: { object: {} } });
    const nowMs = Date.now();
    const stale = stripeSignatureHeader(payload, [newSecret], Math.floor((nowMs - stripeWebhookToleranceMs - 10_000) / 1000));
    const fresh = stripeSignatureHeader(payload, [newSecret], Math.floor((nowMs - stripeWebhookToleranceMs + 10_000) / 1000));
    expect(connector([newSecret]).verifyWebhook({ payload, signatureHeader: stale, receivedAtMs: nowMs })).toMatchObject({ outcome: 'refused', reason: 'too_old' });
    expect(connector([newSecret]).verifyWebhook({ payload, signatureHeader: fresh, receivedAtMs: nowMs }).outcome).toBe('verified');
  });

  it('a header without t= and v1= is refused as malformed', () => {
    expect(connector([newSecret]).verifyWebhook({ payload: '{}', signatureHeader: 'garbage' })).toMatchObject({ outcome: 'refused', reason: 'malformed' });
  });

  it('rotation: during it Stripe signs with both secrets; a receiver holding either, or both, verifies', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret, oldSecret] });
    await authorizeOne('ch_hook_rotation');
    await vi.waitFor(() => expect(received.length).toBeGreaterThanOrEqual(1), { timeout: conditionTimeoutMs });
    const event = received[0]!;
    expect(event.signature.match(/v1=/g)).toHaveLength(2);
    for (const secrets of [[oldSecret], [newSecret], [newSecret, oldSecret]]) {
      expect(connector(secrets).verifyWebhook({ payload: event.body, signatureHeader: event.signature }).outcome).toBe('verified');
    }
    // After the rotation the old secret alone signs nothing new; a receiver that kept only the new one
    // still verifies an event signed with the old one only if it kept both.
    const oldOnly = stripeSignatureHeader(event.body, [oldSecret], Math.floor(Date.now() / 1000));
    expect(connector([newSecret, oldSecret]).verifyWebhook({ payload: event.body, signatureHeader: oldOnly }).outcome).toBe('verified');
    expect(connector([newSecret]).verifyWebhook({ payload: event.body, signatureHeader: oldOnly }).outcome).toBe('refused');
  });
});

describe('webhook delivery faults', () => {
  it('late: each event arrives no sooner than the configured delay, still verifiable', async () => {
    const deliveryDelayMs = 300;
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret], deliveryDelayMs });
    const sentAtMs = Date.now();
    await authorizeOne('ch_hook_late');
    await vi.waitFor(() => expect(received.length).toBe(2), { timeout: conditionTimeoutMs });
    expect(received.every((r) => r.atMs - sentAtMs >= deliveryDelayMs)).toBe(true);
    expect(received.every((r) => connector([newSecret]).verifyWebhook({ payload: r.body, signatureHeader: r.signature }).outcome === 'verified')).toBe(true);
  });

  it('twice: the same event id arrives twice (the receiver deduplicates on it)', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret], duplicate: true });
    await authorizeOne('ch_hook_twice');
    await vi.waitFor(() => expect(received.length).toBe(4), { timeout: conditionTimeoutMs });
    const ids = received.map((r) => (JSON.parse(r.body) as { id: string }).id);
    const counts = new Map<string, number>();
    for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
    expect([...counts.values()]).toEqual([2, 2]);
  });

  it('out of order: held events released in reverse arrive newest first', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret], hold: true });
    const paymentId = await authorizeOne('ch_hook_order');
    await connector([newSecret]).capture({ paymentId, idempotencyKey: providerIdempotencyKey('ch_hook_order', 'capture') });
    expect(received).toHaveLength(0);
    expect(sim.webhooks.release('reversed')).toBe(3);
    await vi.waitFor(() => expect(received.length).toBe(3), { timeout: conditionTimeoutMs });
    expect(received.map((r) => (JSON.parse(r.body) as { type: string }).type)).toEqual([
      'payment_intent.succeeded',
      'payment_intent.amount_capturable_updated',
      'payment_intent.created',
    ]);
  });
});
