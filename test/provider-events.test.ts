import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createProviderActivities, type ProviderActivities } from '../activities/provider-activities.js';
import type { ChargeIntent } from '../src/domain/charge.js';
import { cancelHold, readCharge } from '../src/ledger/charges.js';
import { tryProviderHold } from '../src/ledger/provider-charges.js';
import { readProviderEvent } from '../src/ledger/provider-events.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { stripeSignatureHeader, type StoredEvent } from '../src/providers/stripe/simulator/webhooks.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import { ProviderEventService, type SignalCharge } from '../src/service/provider-events.js';
import type { ProviderEventSignal } from '../workflows/definitions.js';
import { openTestApi, type TestApi } from './support/api.js';
import { fundedTenant, newKey, providerIntent, useHarness, waitFor } from './support/harness.js';

// Holds these tests make with no workflow are never settled: held for a day, so a reconcile of all
// tenants (test/reconcile.test.ts) run minutes later does not find them past their expiry.
const heldForADayMs = 86_400_000;

/**
 * POST /v1/provider-events/stripe (docs/providers.md, Webhooks) against the simulator's signed
 * deliveries, the real API, PostgreSQL and Temporal. Charges are brought to each state with the
 * provider activities alone, without a workflow, so Temporal answers that the charge's workflow is
 * not running and the late rule applies; the running-workflow path is tested with an injected
 * signal.
 */
const h = useHarness();
const newSecret = 'whsec_new_provider_events';
const oldSecret = 'whsec_old_provider_events';
let sim: StripeSimulator;
let stripe: StripeConnector;
let steps: ProviderActivities;
let api: TestApi;
let receiverUrl: string;

beforeAll(async () => {
  sim = await StripeSimulator.start({ port: 0 });
  // No SDK retries: a fault the test arms reaches the receiver as it would after the SDK's retries.
  stripe = new StripeConnector({ apiKey: 'sk_test_pe', webhookSecrets: [newSecret, oldSecret], endpoint: sim.endpoint, maxNetworkRetries: 0, requestTimeoutMs: 2_000 });
  steps = createProviderActivities(h.pool, { stripe });
  api = await openTestApi({ providers: { stripe } });
  receiverUrl = `${api.baseUrl}/v1/provider-events/stripe`;
});

afterEach(async () => {
  sim.webhooks.release();
  await sim.webhooks.idle();
  sim.configureWebhooks(null);
  sim.faults.clear();
});

afterAll(async () => {
  await api?.close();
  await sim?.stop();
});

async function newCharge(paymentMethod = 'pm_card_visa'): Promise<ChargeIntent> {
  const tenant = await fundedTenant(h, { label: 'pev' });
  return providerIntent(tenant, newKey(), paymentMethod, { captureMode: 'manual' });
}

/** Try, authorize, then the ledger's Cancel without the void: what a crashed compensation or the hold sweeper leaves. */
async function orphanedAuthorization(): Promise<{ intent: ChargeIntent; paymentId: string }> {
  const intent = await newCharge();
  await tryProviderHold(h.pool, intent, heldForADayMs);
  const authorized = await steps.authorizeAtProvider(intent);
  await cancelHold(h.pool, intent, 'requested_by_caller');
  return { intent, paymentId: authorized!.charge.provider!.paymentId! };
}

function eventsOf(paymentId: string): StoredEvent[] {
  return sim.webhooks.events.filter((event) => (JSON.parse(event.payload) as { data: { object: { id: string } } }).data.object.id === paymentId);
}

function cancelsOf(paymentId: string): number {
  return sim.requests.filter((r) => r.operation === 'cancel_payment_intent' && r.path.includes(paymentId) && r.status === 200 && !r.replayed).length;
}

async function actionsOf(paymentId: string): Promise<Record<string, string>> {
  const { rows } = await h.pool.query<{ event_type: string; action: string }>(
    'SELECT event_type, action FROM provider_events WHERE provider = $1 AND payment_id = $2',
    ['stripe', paymentId],
  );
  return Object.fromEntries(rows.map((row) => [row.event_type, row.action]));
}

/** Delivers a stored event ourselves, signed now (or as told), as the provider's redelivery would. */
async function deliver(event: StoredEvent, options: { secrets?: string[]; timestampS?: number; payload?: string; header?: string | null } = {}) {
  const payload = options.payload ?? event.payload;
  const header = options.header === undefined ? stripeSignatureHeader(event.payload, options.secrets ?? [newSecret], options.timestampS ?? Math.floor(Date.now() / 1000)) : options.header;
  return api.request('/v1/provider-events/stripe', {
    rawBody: payload,
    headers: { 'content-type': 'application/json; charset=utf-8', ...(header === null ? {} : { 'stripe-signature': header }) },
  });
}

async function deliveredAll(count: number): Promise<void> {
  await waitFor(async () => {
    await sim.webhooks.idle();
    return sim.webhooks.deliveries.length >= count;
  }, { what: `${count} deliveries` });
}

describe('signatures', () => {
  let event: StoredEvent;
  beforeAll(async () => {
    const intent = await newCharge();
    await tryProviderHold(h.pool, intent, heldForADayMs);
    const authorized = await steps.authorizeAtProvider(intent);
    event = eventsOf(authorized!.charge.provider!.paymentId!).at(-1)!;
  });

  it.each([
    ['no header', { header: null }, 'missing'],
    ['a secret we do not hold', { secrets: ['whsec_someone_else'] }, 'bad_signature'],
    ['a body changed after signing', { payload: '' }, 'bad_signature'],
    ['a header without v1', { header: `t=${Math.floor(Date.now() / 1000)}` }, 'malformed'],
    ['a signature older than the tolerance (a replay)', { timestampS: Math.floor(Date.now() / 1000) - 6 * 60 }, 'too_old'],
  ])('refuses %s with 400 naming Stripe-Signature, and records nothing', async (_what, options, reason) => {
    const changed = 'payload' in options ? { payload: event.payload.replace('"livemode": false', '"livemode": true') } : {};
    const response = await deliver(event, { ...options, ...changed });
    expect(response.status, response.text).toBe(400);
    expect(response.body.errors[0].field).toBe('Stripe-Signature');
    expect(response.body.errors[0].message).toContain(reason);
    expect(await readProviderEvent(h.pool, 'stripe', event.id)).toBeNull();
  });

  it('accepts an event signed only with the older secret during a rotation', async () => {
    const response = await deliver(event, { secrets: [oldSecret] });
    expect(response.status, response.text).toBe(200);
    expect(response.body).toMatchObject({ object: 'provider_event', id: event.id, provider: 'stripe', replayed: false });
  });

  it('answers 404 for a provider it does not know, before reading anything', async () => {
    const response = await api.request('/v1/provider-events/paypal', { rawBody: event.payload, headers: { 'stripe-signature': 'x' } });
    expect(response.status).toBe(404);
  });
});

describe('the late rule: a charge whose workflow has closed', () => {
  it('voids an orphan authorization of a cancelled charge once, and records the void on the charge', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret], hold: true });
    const { intent, paymentId } = await orphanedAuthorization();
    expect(sim.webhooks.release()).toBe(2);
    await deliveredAll(sim.webhooks.deliveries.length);
    await waitFor(async () => (await actionsOf(paymentId))['payment_intent.amount_capturable_updated'], { what: 'the event recorded' });

    expect(sim.payments.paymentIntents.get(paymentId)!.status).toBe('canceled');
    expect(cancelsOf(paymentId)).toBe(1);
    const row = await readCharge(h.pool, intent.tenant, intent.idempotencyKey);
    expect(row).toMatchObject({ holdState: 'CANCELLED', charge: { provider: { state: 'voided', paymentId } } });
    expect(await actionsOf(paymentId)).toEqual({ 'payment_intent.created': 'no_action', 'payment_intent.amount_capturable_updated': 'voided' });
    // The void used the charge's void key: the workflow's own void would replay it, not send another.
    expect(sim.requests.find((r) => r.operation === 'cancel_payment_intent' && r.path.includes(paymentId))!.idempotencyKey).toBe(`${intent.chargeId}:void`);
  });

  it('delivered twice, each event acts once: the second delivery answers 200, replayed, and sends nothing', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret, oldSecret], duplicate: true, hold: true });
    const before = sim.webhooks.deliveries.length;
    const { paymentId } = await orphanedAuthorization();
    sim.webhooks.release();
    await deliveredAll(before + 4);
    // The void's own payment_intent.canceled is held now; the four deliveries are of the two earlier events.
    const ours = sim.webhooks.deliveries.slice(before).filter((d) => eventsOf(paymentId).some((e) => e.id === d.eventId));
    expect(ours.map((d) => d.status)).toEqual([200, 200, 200, 200]);
    expect(cancelsOf(paymentId)).toBe(1);
    expect(await actionsOf(paymentId)).toEqual({ 'payment_intent.created': 'no_action', 'payment_intent.amount_capturable_updated': 'voided' });
    // Redelivered once more by hand, later: still nothing.
    const response = await deliver(eventsOf(paymentId).find((e) => e.type === 'payment_intent.amount_capturable_updated')!);
    expect(response.status).toBe(200);
    expect(response.headers.get('idempotent-replayed')).toBe('true');
    expect(response.body).toMatchObject({ action: 'voided', replayed: true });
    expect(cancelsOf(paymentId)).toBe(1);
  });

  it('delivered late (after a delay), the orphan is still voided once', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret], deliveryDelayMs: 300, hold: true });
    const { intent, paymentId } = await orphanedAuthorization();
    sim.webhooks.release();
    await waitFor(async () => Object.keys(await actionsOf(paymentId)).length === 2, { what: 'both events recorded' });
    expect(cancelsOf(paymentId)).toBe(1);
    expect((await readCharge(h.pool, intent.tenant, intent.idempotencyKey))!.charge.provider!.state).toBe('voided');
  });

  it('delivered while the charge was still held, an authorization event does nothing: the ledger had not decided', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret] });
    const intent = await newCharge();
    await tryProviderHold(h.pool, intent, heldForADayMs);
    const authorized = await steps.authorizeAtProvider(intent);
    const paymentId = authorized!.charge.provider!.paymentId!;
    await waitFor(async () => Object.keys(await actionsOf(paymentId)).length === 2, { what: 'both events recorded' });
    expect(await actionsOf(paymentId)).toEqual({ 'payment_intent.created': 'no_action', 'payment_intent.amount_capturable_updated': 'no_action' });
    expect(cancelsOf(paymentId)).toBe(0);
    expect(sim.payments.paymentIntents.get(paymentId)!.status).toBe('requires_capture');
  });

  it('out of order (reversed) after the compensation voided, nothing is sent: the ledger recorded this payment voided', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret], hold: true });
    const { intent, paymentId } = await orphanedAuthorization();
    await steps.voidAtProvider(intent.tenant, intent.idempotencyKey);
    expect(eventsOf(paymentId).map((e) => e.type)).toEqual(['payment_intent.created', 'payment_intent.amount_capturable_updated', 'payment_intent.canceled']);
    expect(sim.webhooks.release('reversed')).toBe(3);
    await waitFor(async () => Object.keys(await actionsOf(paymentId)).length === 3, { what: 'three events recorded' });
    expect(await actionsOf(paymentId)).toEqual({
      'payment_intent.canceled': 'no_action',
      'payment_intent.amount_capturable_updated': 'no_action',
      'payment_intent.created': 'no_action',
    });
    expect(cancelsOf(paymentId)).toBe(1);
  });

  it('late events of a captured charge change nothing', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret], hold: true });
    const intent = await newCharge();
    await tryProviderHold(h.pool, intent, heldForADayMs);
    const authorized = await steps.authorizeAtProvider(intent);
    const paymentId = authorized!.charge.provider!.paymentId!;
    await steps.captureAtProvider(intent.tenant, intent.idempotencyKey, null);
    sim.webhooks.release('reversed');
    await waitFor(async () => Object.keys(await actionsOf(paymentId)).length === 3, { what: 'three events recorded' });
    expect(Object.values(await actionsOf(paymentId))).toEqual(['no_action', 'no_action', 'no_action']);
    expect(cancelsOf(paymentId)).toBe(0);
    expect(sim.payments.paymentIntents.get(paymentId)!.status).toBe('succeeded');
    expect((await readCharge(h.pool, intent.tenant, intent.idempotencyKey))!.holdState).toBe('CONFIRMED');
  });

  it('a void the provider leaves unanswered is a 500 and records nothing; the redelivery voids', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret], hold: true });
    const { intent, paymentId } = await orphanedAuthorization();
    sim.addFault({ operation: 'cancel_payment_intent', fault: { kind: 'error_before_commit', status: 503 }, times: 1, idempotencyKeyPrefix: intent.chargeId });
    const authorizedEvent = eventsOf(paymentId).find((e) => e.type === 'payment_intent.amount_capturable_updated')!;
    const failed = await deliver(authorizedEvent);
    expect(failed.status, failed.text).toBe(500);
    expect(await readProviderEvent(h.pool, 'stripe', authorizedEvent.id)).toBeNull();
    expect(sim.payments.paymentIntents.get(paymentId)!.status).toBe('requires_capture');

    const redelivered = await deliver(authorizedEvent);
    expect(redelivered.status, redelivered.text).toBe(200);
    expect(redelivered.body).toMatchObject({ action: 'voided', replayed: false });
    expect(sim.payments.paymentIntents.get(paymentId)!.status).toBe('canceled');
  });
});

describe('payments that are not a charge of ours', () => {
  it('records a payment with our reference but no charge row, answers 200, and voids nothing', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret] });
    const tenant = await fundedTenant(h, { label: 'pev' });
    const made = await stripe.authorize({
      reference: { tenant, chargeId: 'ch_nobody_made_this' },
      amountMinor: 500,
      currency: 'USD',
      paymentMethod: 'pm_card_visa',
      idempotencyKey: newKey('stray'),
    });
    if (made.outcome !== 'authorized') throw new Error(made.outcome);
    await waitFor(async () => Object.keys(await actionsOf(made.payment.id)).length === 2, { what: 'both events recorded' });
    expect(await actionsOf(made.payment.id)).toEqual({ 'payment_intent.created': 'no_charge', 'payment_intent.amount_capturable_updated': 'no_charge' });
    expect(sim.payments.paymentIntents.get(made.payment.id)!.status).toBe('requires_capture');
  });

  it('records a payment without our metadata as not ours', async () => {
    sim.configureWebhooks({ url: receiverUrl, secrets: [newSecret] });
    const response = await fetch(`${sim.url}/v1/payment_intents`, {
      method: 'POST',
      headers: { authorization: 'Bearer sk_test_pe', 'content-type': 'application/x-www-form-urlencoded' },
      body: 'amount=700&currency=usd&payment_method=pm_card_visa&confirm=true&capture_method=manual&allowed_payment_method_types[0]=card',
    });
    expect(response.status).toBe(200);
    const paymentId = ((await response.json()) as { id: string }).id;
    await waitFor(async () => Object.keys(await actionsOf(paymentId)).length === 2, { what: 'both events recorded' });
    expect(Object.values(await actionsOf(paymentId))).toEqual(['not_ours', 'not_ours']);
  });
});

describe('a charge whose workflow is running', () => {
  it('is signalled with the event, and neither voided nor signalled again on a redelivery', async () => {
    const signals: { tenant: string; key: string; event: ProviderEventSignal }[] = [];
    const signalCharge: SignalCharge = async (tenant, key, event) => {
      signals.push({ tenant, key, event });
      return 'signalled';
    };
    const service = new ProviderEventService({ ledger: h.pool, connectors: { stripe }, signalCharge });
    // Even a cancelled charge: while its workflow runs, voiding is the workflow's to do.
    const { intent, paymentId } = await orphanedAuthorization();
    const event = eventsOf(paymentId).find((e) => e.type === 'payment_intent.amount_capturable_updated')!;
    const delivery = () => ({
      provider: 'stripe',
      signatureHeader: stripeSignatureHeader(event.payload, [newSecret], Math.floor(Date.now() / 1000)),
      rawBody: Buffer.from(event.payload),
      receivedAtMs: Date.now(),
    });
    expect(await service.receive(delivery())).toMatchObject({ action: 'signalled', replayed: false });
    expect(await service.receive(delivery())).toMatchObject({ action: 'signalled', replayed: true });
    expect(signals).toEqual([{ tenant: intent.tenant, key: intent.idempotencyKey, event: { eventId: event.id, type: event.type, paymentId } }]);
    expect(cancelsOf(paymentId)).toBe(0);
  });
});

/** Signs a body of our own making with the provider's secret, as only the secret's holder could. */
async function deliverBody(payload: string, timestampS = Math.floor(Date.now() / 1000)) {
  return api.request('/v1/provider-events/stripe', {
    rawBody: payload,
    headers: { 'content-type': 'application/json', 'stripe-signature': stripeSignatureHeader(payload, [newSecret], timestampS) },
  });
}

describe('events are evidence only once the provider confirms them', () => {
  /** Tenant B's charge, authorized and left with its workflow closed: the payment an attacker names. */
  async function authorizedElsewhere(): Promise<{ intent: ChargeIntent; paymentId: string; event: StoredEvent }> {
    const intent = await newCharge();
    await tryProviderHold(h.pool, intent, heldForADayMs);
    const paymentId = (await steps.authorizeAtProvider(intent))!.charge.provider!.paymentId!;
    const event = eventsOf(paymentId).find((e) => e.type === 'payment_intent.amount_capturable_updated')!;
    return { intent, paymentId, event };
  }

  /** B's event, re-signed with A's tenant and charge id in the payment's metadata and a fresh event id. */
  function paired(event: StoredEvent, a: ChargeIntent): string {
    const body = JSON.parse(event.payload) as { id: string; data: { object: { metadata: Record<string, string> } } };
    body.id = `evt_forged_${newKey('f')}`.slice(0, 60);
    body.data.object.metadata = { tenant: a.tenant, charge_id: a.chargeId };
    return JSON.stringify(body);
  }

  it("an event pairing tenant B's authorized payment with tenant A's declined charge voids nothing: 200, payment_mismatch", async () => {
    const b = await authorizedElsewhere();
    const a = await newCharge('pm_card_visa_chargeDeclinedInsufficientFunds');
    await tryProviderHold(h.pool, a, heldForADayMs);
    const declined = await steps.authorizeAtProvider(a);
    expect(declined!.holdState).toBe('DECLINED');

    const response = await deliverBody(paired(b.event, a));
    expect(response.status, response.text).toBe(200);
    expect(response.body).toMatchObject({ action: 'payment_mismatch', replayed: false });
    expect(cancelsOf(b.paymentId)).toBe(0);
    expect(sim.payments.paymentIntents.get(b.paymentId)!.status).toBe('requires_capture');
    // B's capture still goes through.
    expect((await steps.captureAtProvider(b.intent.tenant, b.intent.idempotencyKey, null)).holdState).toBe('CONFIRMED');
  });

  it("the same pairing with a cancelled charge of A's that recorded no payment: the provider's metadata names B, nothing is voided", async () => {
    const b = await authorizedElsewhere();
    const a = await newCharge();
    await tryProviderHold(h.pool, a, heldForADayMs);
    await cancelHold(h.pool, a, 'requested_by_caller');
    const reads = sim.requests.filter((r) => r.operation === 'retrieve_payment_intent').length;

    const response = await deliverBody(paired(b.event, a));
    expect(response.status, response.text).toBe(200);
    expect(response.body).toMatchObject({ action: 'payment_mismatch' });
    // The provider was asked (one read), and its answer decided.
    expect(sim.requests.filter((r) => r.operation === 'retrieve_payment_intent').length).toBe(reads + 1);
    expect(cancelsOf(b.paymentId)).toBe(0);
    expect(sim.payments.paymentIntents.get(b.paymentId)!.status).toBe('requires_capture');
    const row = await readCharge(h.pool, a.tenant, a.idempotencyKey);
    expect(row!.charge.provider!.paymentId).toBeNull();
  });

  it('a signature dated beyond the tolerance in the future is refused with 400 naming Stripe-Signature (future), and records nothing', async () => {
    const { event } = await authorizedElsewhere();
    const response = await deliver(event, { timestampS: Math.floor(Date.now() / 1000) + 6 * 60 });
    expect(response.status, response.text).toBe(400);
    expect(response.body.errors[0]).toMatchObject({ field: 'Stripe-Signature' });
    expect(response.body.errors[0].message).toContain('future');
    expect(await readProviderEvent(h.pool, 'stripe', event.id)).toBeNull();
    // Within the tolerance a clock ahead of ours is fine.
    expect((await deliver(event, { timestampS: Math.floor(Date.now() / 1000) + 60 })).status).toBe(200);
  });
});

describe('signed bodies that are not events: 400 naming the field, never a 5xx, nothing recorded', () => {
  let base: Record<string, unknown>;
  beforeAll(async () => {
    const intent = await newCharge();
    await tryProviderHold(h.pool, intent, heldForADayMs);
    const paymentId = (await steps.authorizeAtProvider(intent))!.charge.provider!.paymentId!;
    base = JSON.parse(eventsOf(paymentId).at(-1)!.payload) as Record<string, unknown>;
  });

  /** The base event with one change, under an event id of its own (so a record of it could be found). */
  function changed(change: (event: Record<string, any>) => void): { payload: string; id: string } {
    const event = structuredClone(base) as Record<string, any>;
    event.id = `evt_shape_${randomBytes(6).toString('hex')}`;
    change(event);
    return { payload: JSON.stringify(event), id: event.id };
  }

  const shapes: [string, () => { payload: string; id: string | null }, string][] = [
    ['a top-level array', () => ({ payload: JSON.stringify([base]), id: null }), 'body'],
    ['a top-level string', () => ({ payload: '"payment_intent.succeeded"', id: null }), 'body'],
    ['data.object null', () => changed((e) => (e.data.object = null)), 'data.object'],
    ['no data', () => changed((e) => delete e.data), 'data'],
    ['no id', () => ({ ...changed((e) => delete e.id), id: null }), 'id'],
    ['an id that is a number', () => ({ ...changed((e) => (e.id = 42)), id: null }), 'id'],
    ['no type', () => changed((e) => delete e.type), 'type'],
    ['a type with a NUL', () => changed((e) => (e.type = 'payment_intent.\u0000succeeded')), 'type'],
    ['created as a string', () => changed((e) => (e.created = '1764000000')), 'created'],
    ['a currency that is a number', () => changed((e) => (e.data.object.currency = 840)), 'data.object.currency'],
    ['NUL in metadata', () => changed((e) => (e.data.object.metadata.tenant = 't\u0000x')), 'data.object.metadata.tenant'],
    ['a metadata value that is a number', () => changed((e) => (e.data.object.metadata.charge_id = 7)), 'data.object.metadata.charge_id'],
    ['a negative amount', () => changed((e) => (e.data.object.amount = -1)), 'data.object.amount'],
    ['no status', () => changed((e) => delete e.data.object.status), 'data.object.status'],
    ['not an event object', () => changed((e) => (e.object = 'payment_intent')), 'object'],
    ['a fractional amount', () => {
      const { payload, id } = changed((e) => (e.data.object.amount = 1000));
      return { payload: payload.replace('"amount":1000', '"amount":1000.5'), id };
    }, 'data.object.amount'],
    ['a member given twice', () => {
      const { payload, id } = changed(() => undefined);
      return { payload: payload.replace('{"id":', '{"type":"payment_intent.canceled","id":'), id };
    }, 'type'],
    ['a __proto__ member', () => {
      const { payload, id } = changed(() => undefined);
      return { payload: payload.replace('"data":{', '"data":{"__proto__":{"x":1},'), id };
    }, 'data.__proto__'],
    ['5,000 levels of nesting', () => ({ payload: `{"id":"evt_deep","object":"event","data":${'['.repeat(5_000)}${']'.repeat(5_000)}}`, id: 'evt_deep' }), 'body'],
    ['not JSON', () => ({ payload: '{"id": "evt_half', id: null }), 'body'],
  ];

  it.each(shapes)('%s', async (_what, make, field) => {
    const { payload, id } = make();
    const response = await deliverBody(payload);
    expect(response.status, response.text).toBe(400);
    expect(response.body.errors[0].field).toBe(field);
    if (id) expect(await readProviderEvent(h.pool, 'stripe', id)).toBeNull();
  });
});

describe('a provider charge cancelled in the ledger whose void is not recorded yet, through the API', () => {
  it('GET answers status cancelling; POST cancel answers 202 with Location and Retry-After; after the void, 200 cancelled', async () => {
    const { intent, paymentId } = await orphanedAuthorization();
    const apiKey = await api.keyFor(intent.tenant, 'admin');
    const path = `/v1/charges/${encodeURIComponent(intent.idempotencyKey)}`;

    const read = await api.request(path, { apiKey });
    expect(read.status, read.text).toBe(200);
    expect(read.body).toMatchObject({ status: 'cancelling' });

    const cancel = await api.request(`${path}/cancel`, { method: 'POST', apiKey });
    expect(cancel.status, cancel.text).toBe(202);
    expect(cancel.body).toMatchObject({ status: 'cancelling' });
    expect(cancel.headers.get('location')).toBe(path);
    expect(Number(cancel.headers.get('retry-after'))).toBeGreaterThan(0);

    await steps.voidAtProvider(intent.tenant, intent.idempotencyKey);
    expect(sim.payments.paymentIntents.get(paymentId)!.status).toBe('canceled');
    const again = await api.request(`${path}/cancel`, { method: 'POST', apiKey });
    expect(again.status, again.text).toBe(200);
    expect(again.body).toMatchObject({ status: 'cancelled' });
  });
});

describe('a stranded provider hold released by a cancel whose void cannot be sent', () => {
  it('answers 202 cancelling (the ledger released it; the void goes on), not 503', async () => {
    // Held with no workflow: the cancel starts a release on the shared worker, which has no Stripe
    // connector, so its void is retried and never answered while the test looks.
    const intent = await newCharge();
    await tryProviderHold(h.pool, intent, heldForADayMs);
    await steps.authorizeAtProvider(intent);
    const apiKey = await api.keyFor(intent.tenant, 'admin');
    const cancel = await api.request(`/v1/charges/${encodeURIComponent(intent.idempotencyKey)}/cancel`, { method: 'POST', apiKey });
    expect(cancel.status, cancel.text).toBe(202);
    expect(cancel.body).toMatchObject({ status: 'cancelling' });
    expect((await readCharge(h.pool, intent.tenant, intent.idempotencyKey))!.holdState).toBe('CANCELLED');
  });
});
