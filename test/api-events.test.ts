import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventTypes } from '../src/domain/events.js';
import { chargeIdFor } from '../src/domain/request-fingerprint.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import { wireEventSchema } from '../src/service/events.js';
import type { ChargePolicy } from '../workflows/definitions.js';
import { fundedApiTenant, openTestApi, type TestApi } from './support/api.js';
import { expectLedgerInvariants, newKey, startTestWorker, testPolicy, useHarness, waitFor } from './support/harness.js';
import { callTool, mcpOverHttp, structured } from './support/mcp.js';
import { disabledEndpointEvent } from './support/webhook-events.js';

/**
 * GET /v1/events and GET /v1/events/{id} over the real API, Temporal and PostgreSQL (docs/events.md):
 * for every event type, the event's data.object is exactly what GET of the object answered right
 * after the change (the deposit: what its POST answered, there being no GET of a deposit); the
 * list filters and pages as Stripe's lists do; another tenant sees none of it. A worker of its own
 * with the Stripe connector pointed at the simulator, for the 3-D Secure charge.
 */
const h = useHarness();
const taskQueue = `api-events-${randomBytes(4).toString('hex')}`;
const policy: ChargePolicy = { ...testPolicy, providerStepStartToCloseMs: 10_000, providerAuthorizeBudgetMs: 20_000 };
let sim: StripeSimulator;
let worker: Awaited<ReturnType<typeof startTestWorker>>;
let api: TestApi;

beforeAll(async () => {
  sim = await StripeSimulator.start({ port: 0 });
  const stripe = new StripeConnector({ apiKey: 'sk_test_chargeguard', webhookSecrets: ['whsec_test'], endpoint: sim.endpoint, maxNetworkRetries: 0, requestTimeoutMs: 2_000 });
  worker = await startTestWorker({ taskQueue, pool: h.pool, providers: { stripe }, holdSweeper: false });
  api = await openTestApi({ providers: { stripe }, charges: { taskQueue, policy } });
  sim.configureWebhooks({ url: `${api.baseUrl}/v1/provider-events/stripe`, secrets: ['whsec_test'] });
});

afterAll(async () => {
  sim?.configureWebhooks(null);
  await api?.close();
  await worker?.stop();
  await sim?.stop();
});

function chargeBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return { order_id: `order-${randomBytes(4).toString('hex')}`, payer_account_id: 'payer', payee_account_id: 'payee', amount: 1_000, currency: 'USD', ...overrides };
}

/** The events of one object, oldest first, through the API. */
async function eventsOf(apiKey: string, objectId: string): Promise<any[]> {
  const response = await api.request(`/v1/events?object_id=${encodeURIComponent(objectId)}&limit=100`, { apiKey });
  expect(response.status, response.text).toBe(200);
  return [...response.body.data].reverse();
}

/** The object's last event, once it is of `type`, read back through GET /v1/events/{id}. */
async function lastEvent(apiKey: string, objectId: string, type: string): Promise<any> {
  const last = await waitFor(async () => {
    const events = await eventsOf(apiKey, objectId);
    return events.at(-1)?.type === type ? events.at(-1) : null;
  }, { what: `${type} of ${objectId}` });
  const one = await api.request(`/v1/events/${last.id}`, { apiKey });
  expect(one.status, one.text).toBe(200);
  expect(one.body).toEqual(last);
  expect(wireEventSchema.parse(one.body)).toEqual(one.body);
  return one.body;
}

describe('each event type: data.object is what GET of the object answered right after the change', () => {
  it('charge.reserved, charge.succeeded (capture), charge.cancelled, charge.declined; refund.succeeded, refund.failed; deposit.credited', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'events-types', payerMinor: 5_000 });
    const seen = new Set<string>();
    const expectEvent = async (objectId: string, type: string, shown: unknown, sequence: number) => {
      const event = await lastEvent(apiKey, objectId, type);
      expect(event).toMatchObject({ object: 'event', type, sequence });
      expect(event.id).toMatch(/^evt_[0-9a-f]{32}$/);
      expect(event.data.object).toEqual(shown);
      seen.add(type);
    };

    // A manual charge: reserved, then captured.
    const manualKey = newKey('manual');
    const created = await api.request('/v1/charges', { apiKey, body: chargeBody({ capture: 'manual' }), headers: { 'idempotency-key': manualKey } });
    expect(created.status, created.text).toBe(201);
    const reserved = await api.request(`/v1/charges/${manualKey}`, { apiKey });
    expect(reserved.body.status).toBe('reserved');
    await expectEvent(reserved.body.id, 'charge.reserved', reserved.body, 1);
    const captured = await api.request(`/v1/charges/${manualKey}/capture`, { apiKey, body: { amount: 800 } });
    expect(captured.status, captured.text).toBe(200);
    const succeeded = await api.request(`/v1/charges/${manualKey}`, { apiKey });
    expect(succeeded.body).toMatchObject({ status: 'succeeded', amount_captured: 800 });
    await expectEvent(succeeded.body.id, 'charge.succeeded', succeeded.body, 2);

    // Refunds of it: one that succeeds, one for more than is left (refused: a decision).
    const refundKey = newKey('refund');
    const refund = await api.request(`/v1/charges/${manualKey}/refunds`, { apiKey, body: { amount: 300 }, headers: { 'idempotency-key': refundKey } });
    expect(refund.status, refund.text).toBe(201);
    const refundShown = await api.request(`/v1/charges/${manualKey}/refunds/${refundKey}`, { apiKey });
    await expectEvent(refundShown.body.id, 'refund.succeeded', refundShown.body, 1);
    const refusedKey = newKey('refund');
    const refused = await api.request(`/v1/charges/${manualKey}/refunds`, { apiKey, body: { amount: 600 }, headers: { 'idempotency-key': refusedKey } });
    expect(refused.status, refused.text).toBe(409);
    const refusedShown = await api.request(`/v1/charges/${manualKey}/refunds/${refusedKey}`, { apiKey });
    expect(refusedShown.body.status).toBe('failed');
    await expectEvent(refusedShown.body.id, 'refund.failed', refusedShown.body, 1);
    // The refunds changed the charge (partially refunded) without a charge event.
    expect((await eventsOf(apiKey, succeeded.body.id)).map((e) => e.type)).toEqual(['charge.reserved', 'charge.succeeded']);

    // Cancelled: a manual charge's hold released by the caller.
    const cancelKey = newKey('cancel');
    await api.request('/v1/charges', { apiKey, body: chargeBody({ capture: 'manual' }), headers: { 'idempotency-key': cancelKey } });
    const cancelled = await api.request(`/v1/charges/${cancelKey}/cancel`, { apiKey, method: 'POST' });
    expect(cancelled.status, cancelled.text).toBe(200);
    const cancelledShown = await api.request(`/v1/charges/${cancelKey}`, { apiKey });
    expect(cancelledShown.body.status).toBe('cancelled');
    await expectEvent(cancelledShown.body.id, 'charge.cancelled', cancelledShown.body, 2);

    // Declined: more than the payer has. Its one event; no reserved before it.
    const declineKey = newKey('decline');
    const declined = await api.request('/v1/charges', { apiKey, body: chargeBody({ amount: 999_999 }), headers: { 'idempotency-key': declineKey } });
    expect(declined.status, declined.text).toBe(201);
    expect(declined.body.status).toBe('declined');
    const declinedShown = await api.request(`/v1/charges/${declineKey}`, { apiKey });
    expect(declinedShown.body.status).toBe('declined');
    await expectEvent(declinedShown.body.id, 'charge.declined', declinedShown.body, 1);

    // A deposit, by an admin key (which also sees created_by_key_id on the objects it reads).
    const adminKey = await api.keyFor(tenant, 'admin');
    const deposited = await api.request('/v1/accounts/payee/deposits', { apiKey: adminKey, body: { amount: 777 }, headers: { 'idempotency-key': newKey('dep') } });
    expect(deposited.status, deposited.text).toBe(201);
    const depositEvent = await lastEvent(adminKey, deposited.body.id, 'deposit.credited');
    expect(depositEvent).toMatchObject({ type: 'deposit.credited', sequence: 1, data: { object: deposited.body } });
    seen.add('deposit.credited');

    // Audit fields follow the reader's role, as on GET of the object.
    const adminView = await api.request(`/v1/charges/${manualKey}`, { apiKey: adminKey });
    expect(adminView.body.created_by_key_id).toEqual(expect.any(String));
    expect(succeeded.body.created_by_key_id).toBeUndefined();
    const adminEvent = await lastEvent(adminKey, succeeded.body.id, 'charge.succeeded');
    expect(adminEvent.data.object).toEqual({ ...succeeded.body, created_by_key_id: adminView.body.created_by_key_id });

    // requires_action needs a card charge (test/provider-charges), webhook_endpoint.disabled a failing
    // endpoint (test/webhook-delivery.test.ts): every other type is a change made here.
    expect([...seen].sort()).toEqual(eventTypes.filter((type) => type !== 'charge.requires_action' && type !== 'webhook_endpoint.disabled').sort());
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('charge.requires_action (3-D Secure) is the charge as GET showed it while the payer had to act; then reserved and succeeded', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'events-3ds' });
    const key = newKey('3ds');
    const body = { order_id: 'order-3ds', payment_method: 'pm_card_threeDSecure2Required', payee_account_id: 'payee', amount: 900, currency: 'USD', return_url: 'https://shop.example/paid' };
    const first = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': key } });
    expect(first.status, first.text).toBe(202);
    const location = first.headers.get('location')!;
    const waiting = await waitFor(async () => {
      const shown = await api.request(location, { apiKey });
      return shown.body.status === 'requires_action' ? shown : null;
    }, { what: 'the charge to wait for its payer' });
    const event = await lastEvent(apiKey, waiting.body.id, 'charge.requires_action');
    expect(event.data.object).toEqual(waiting.body);
    expect(event.data.object.next_action).toMatchObject({ type: 'redirect_to_url' });

    const payment = [...sim.payments.paymentIntents.values()].find((p) => p.metadata['charge_id'] === chargeIdFor(tenant, key))!;
    const authenticated = await fetch(`${sim.url}/_simulator/payment_intents/${payment.id}/authenticate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ outcome: 'succeed' }),
    });
    expect(authenticated.status).toBe(200);
    const decided = await waitFor(async () => {
      const shown = await api.request(location, { apiKey });
      return shown.body.status === 'succeeded' ? shown : null;
    }, { what: 'the charge to succeed', timeoutMs: 60_000 });
    const last = await lastEvent(apiKey, decided.body.id, 'charge.succeeded');
    expect(last.data.object).toEqual(decided.body);
    const events = await eventsOf(apiKey, decided.body.id);
    expect(events.map((e) => e.type)).toEqual(['charge.reserved', 'charge.requires_action', 'charge.reserved', 'charge.succeeded']);
    expect(events.map((e) => e.sequence)).toEqual([1, 2, 3, 4]);
  });
});

describe('GET /v1/events: filters, pages, refusals, tenants', () => {
  it('newest first; type and object_id filter; starting_after and ending_before page by event id', async () => {
    const { apiKey } = await fundedApiTenant(api, { label: 'events-list', payerMinor: 10_000 });
    const ids: string[] = [];
    for (let i = 0; i < 3; i += 1) {
      const response = await api.request('/v1/charges', { apiKey, body: chargeBody({ amount: 100 + i }), headers: { 'idempotency-key': newKey(`list${i}`) } });
      expect(response.status, response.text).toBe(201);
      ids.push(response.body.id);
    }
    const all = await api.request('/v1/events?limit=100', { apiKey });
    expect(all.body).toMatchObject({ object: 'list', has_more: false, url: '/v1/events' });
    // The payer's opening deposit, then each automatic charge's reserved and succeeded: newest first.
    const types = all.body.data.map((e: any) => e.type);
    expect(types).toEqual([
      'charge.succeeded', 'charge.reserved', 'charge.succeeded', 'charge.reserved', 'charge.succeeded', 'charge.reserved', 'deposit.credited',
    ]);
    expect(all.body.data.map((e: any) => e.data.object.id).slice(0, 6)).toEqual([ids[2], ids[2], ids[1], ids[1], ids[0], ids[0]]);

    const succeeded = await api.request('/v1/events?type=charge.succeeded', { apiKey });
    expect(succeeded.body.data.map((e: any) => e.data.object.id)).toEqual([ids[2], ids[1], ids[0]]);
    const charges = await api.request('/v1/events?type=charge.*', { apiKey });
    expect(charges.body.data).toHaveLength(6);
    const one = await api.request(`/v1/events?object_id=${ids[1]}`, { apiKey });
    expect(one.body.data.map((e: any) => [e.type, e.sequence])).toEqual([['charge.succeeded', 2], ['charge.reserved', 1]]);

    const page1 = await api.request('/v1/events?limit=3', { apiKey });
    expect(page1.body.has_more).toBe(true);
    const page2 = await api.request(`/v1/events?limit=3&starting_after=${page1.body.data[2].id}`, { apiKey });
    const page3 = await api.request(`/v1/events?limit=3&starting_after=${page2.body.data[2].id}`, { apiKey });
    expect(page3.body.has_more).toBe(false);
    expect([...page1.body.data, ...page2.body.data, ...page3.body.data]).toEqual(all.body.data);
    const back = await api.request(`/v1/events?limit=3&ending_before=${page3.body.data[0].id}`, { apiKey });
    expect(back.body.data).toEqual(page2.body.data);
  });

  it('refuses unknown parameters, unknown types, cursors that name no event of the tenant, and ids that are not event ids (400 naming the field)', async () => {
    const { apiKey } = await fundedApiTenant(api, { label: 'events-refuse' });
    const cases: Array<[string, string]> = [
      ['/v1/events?status=succeeded', 'status'],
      ['/v1/events?type=charge.exploded', 'type'],
      ['/v1/events?limit=0', 'limit'],
      ['/v1/events?starting_after=evt_00000000000000000000000000000000', 'starting_after'],
      ['/v1/events?starting_after=evt_a&ending_before=evt_b', 'starting_after'],
      ['/v1/events/not-an-event', 'id'],
    ];
    for (const [path, field] of cases) {
      const response = await api.request(path, { apiKey });
      expect(response.status, `${path}: ${response.text}`).toBe(400);
      expect(response.headers.get('content-type')).toMatch(/application\/problem\+json/);
      expect(response.body.errors.map((e: any) => e.field), path).toContain(field);
    }
    const missing = await api.request('/v1/events/evt_00000000000000000000000000000000', { apiKey });
    expect(missing.status).toBe(404);
    const post = await api.request('/v1/events', { apiKey, body: {} });
    expect(post.status).toBe(405);
    const anonymous = await api.request('/v1/events', {});
    expect(anonymous.status).toBe(401);
  });

  it('another tenant sees none of it: its GET of an event is a 404, its list and object filter hold only its own', async () => {
    const a = await fundedApiTenant(api, { label: 'events-a' });
    const b = await fundedApiTenant(api, { label: 'events-b' });
    const charged = await api.request('/v1/charges', { apiKey: a.apiKey, body: chargeBody(), headers: { 'idempotency-key': newKey('iso') } });
    expect(charged.status).toBe(201);
    const [event] = await eventsOf(a.apiKey, charged.body.id);
    expect((await api.request(`/v1/events/${event.id}`, { apiKey: a.apiKey })).status).toBe(200);
    const foreign = await api.request(`/v1/events/${event.id}`, { apiKey: b.apiKey });
    expect(foreign.status).toBe(404);
    expect(foreign.text).not.toContain(charged.body.id);
    expect(await eventsOf(b.apiKey, charged.body.id)).toEqual([]);
    const bList = await api.request('/v1/events?limit=100', { apiKey: b.apiKey });
    expect(bList.body.data.every((e: any) => e.data.object.id !== charged.body.id)).toBe(true);
    expect(bList.body.data.map((e: any) => e.type)).toEqual(['deposit.credited']);
    const cursor = await api.request(`/v1/events?starting_after=${event.id}`, { apiKey: b.apiKey });
    expect(cursor.status).toBe(400);
  });
});

describe('events of objects a role may not read are invisible to it (webhook_endpoint.* to agent keys)', () => {
  it('an agent key: GET of one is a 404, lists leave it out, its type filter is an empty page, a cursor naming it names no event; MCP list_events the same; an admin key sees it', async () => {
    const { tenant, apiKey: agentKey } = await fundedApiTenant(api, { label: 'events-roles' });
    const adminKey = await api.keyFor(tenant, 'admin');
    const { endpointId, disabledEventId, depositEventId } = await disabledEndpointEvent(api.context.ledger, tenant);

    // The admin key sees the event, as it sees the endpoint.
    const adminOne = await api.request(`/v1/events/${disabledEventId}`, { apiKey: adminKey });
    expect(adminOne.status, adminOne.text).toBe(200);
    expect(adminOne.body).toMatchObject({ type: 'webhook_endpoint.disabled', data: { object: { id: endpointId, object: 'webhook_endpoint', status: 'disabled' } } });
    const adminFiltered = await api.request('/v1/events?type=webhook_endpoint.disabled', { apiKey: adminKey });
    expect(adminFiltered.body.data.map((e: any) => e.id)).toEqual([disabledEventId]);
    const adminAll = await api.request('/v1/events?limit=100', { apiKey: adminKey });
    expect(adminAll.body.data.map((e: any) => e.id)).toContain(disabledEventId);

    // The agent key: as if it did not exist.
    const one = await api.request(`/v1/events/${disabledEventId}`, { apiKey: agentKey });
    expect(one.status).toBe(404);
    expect(one.text).not.toContain(endpointId);
    for (const type of ['webhook_endpoint.disabled', 'webhook_endpoint.*']) {
      const filtered = await api.request(`/v1/events?type=${type}`, { apiKey: agentKey });
      expect(filtered.status, filtered.text).toBe(200);
      expect(filtered.body).toMatchObject({ object: 'list', data: [], has_more: false });
    }
    const byObject = await api.request(`/v1/events?object_id=${endpointId}`, { apiKey: agentKey });
    expect(byObject.body.data).toEqual([]);
    const all = await api.request('/v1/events?limit=100', { apiKey: agentKey });
    expect(all.status).toBe(200);
    expect(all.body.data.map((e: any) => e.id)).toContain(depositEventId);
    expect(all.text).not.toContain(endpointId);
    // One page at a time: the page after the deposit's event does not reach back to it either.
    const paged = await api.request('/v1/events?limit=1', { apiKey: agentKey });
    expect(paged.body.data.map((e: any) => e.id)).toEqual([depositEventId]);
    expect(paged.body.has_more).toBe(true);
    const cursor = await api.request(`/v1/events?starting_after=${disabledEventId}`, { apiKey: agentKey });
    expect(cursor.status).toBe(400);
    expect(cursor.body.errors[0].field).toBe('starting_after');

    // MCP inherits it from the service: list_events of an agent key.
    const { client, transport } = mcpOverHttp(api.baseUrl, agentKey);
    await client.connect(transport);
    try {
      const listed = structured(await callTool(client, 'list_events', { limit: 100 }));
      expect(listed.events.map((e: any) => e.id)).toContain(depositEventId);
      expect(listed.events.map((e: any) => e.type)).not.toContain('webhook_endpoint.disabled');
      const filtered = structured(await callTool(client, 'list_events', { type: 'webhook_endpoint.disabled' }));
      expect(filtered).toMatchObject({ events: [], has_more: false });
    } finally {
      await client.close();
    }
  });
});
