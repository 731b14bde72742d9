/**
 * A Stripe-literate developer's habits work, through the real API in front of the real Temporal
 * server and PostgreSQL (docs/api.md, Lists; Where chargeguard differs from Stripe): pages by object
 * id both ways (the official `stripe` SDK's auto-pagination included), an unknown cursor refused,
 * lists of refunds and accounts, unknown query parameters and `expand` refused on every route of
 * the OpenAPI document, system accounts readable by admin keys only, refunds found by tenant in
 * Temporal's visibility.
 */
import { randomBytes } from 'node:crypto';
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import { refundWorkflowId } from '../src/domain/refund.js';
import { chargeIdFor } from '../src/domain/request-fingerprint.js';
import { chargeBody, fundedTenant, newKey, newTenant, startTestWorker, useHarness, waitFor } from './support/harness.js';
import { useApi, type TestResponse } from './support/api.js';
import { runCli } from './support/cli.js';

const h = useHarness();
const api = useApi();

function expectRefused(response: TestResponse, fields: string[], message?: RegExp): void {
  expect(response.status, response.text).toBe(400);
  expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect((response.body.errors as Array<{ field: string }>).map((error) => error.field).sort()).toEqual([...fields].sort());
  if (message) for (const error of response.body.errors as Array<{ message: string }>) expect(error.message).toMatch(message);
}

/** A tenant with `count` succeeded charges made one after another; their ids and keys, newest first. */
async function tenantWithCharges(label: string, count: number): Promise<{ tenant: string; apiKey: string; ids: string[]; keys: string[] }> {
  const tenant = await fundedTenant(h, { label, payerMinor: 100_000 });
  const apiKey = await api.keyFor(tenant);
  const keys: string[] = [];
  for (let i = 0; i < count; i += 1) {
    const key = newKey(`page-${i}`);
    const created = await api.request('/v1/charges', { apiKey, body: chargeBody({ amount: 100 + i }), headers: { 'idempotency-key': key } });
    expect(created.status, created.text).toBe(201);
    keys.push(key);
  }
  keys.reverse();
  return { tenant, apiKey, keys, ids: keys.map((key) => chargeIdFor(tenant, key)) };
}

/** Every page of a list, following `has_more` with the last (forwards) or first (backwards) object's `field`. */
async function walk(
  apiKey: string,
  path: string,
  direction: 'starting_after' | 'ending_before',
  field: 'id' | 'idempotency_key',
  start: string | null = null,
): Promise<string[][]> {
  const pages: string[][] = [];
  let cursor = start;
  for (;;) {
    const separator = path.includes('?') ? '&' : '?';
    const url = cursor === null ? path : `${path}${separator}${direction}=${encodeURIComponent(cursor)}`;
    const response = await api.request(url, { apiKey });
    expect(response.status, response.text).toBe(200);
    expect(response.body).toMatchObject({ object: 'list', url: path.split('?')[0] });
    const data = response.body.data as Array<Record<string, string>>;
    pages.push(data.map((object) => object.id!));
    if (!response.body.has_more) return pages;
    expect(pages.length, 'pages').toBeLessThan(50);
    cursor = (direction === 'starting_after' ? data.at(-1)! : data[0]!)[field]!;
  }
}

describe('pagination by object id, as Stripe pages', () => {
  it('8 charges in pages of 3 by ch_ ids, forwards and backwards: all 8 exactly once, newest first; keys still work as cursors', async () => {
    const { apiKey, ids, keys } = await tenantWithCharges('pages', 8);
    const forwards = await walk(apiKey, '/v1/charges?limit=3', 'starting_after', 'id');
    expect(forwards).toEqual([ids.slice(0, 3), ids.slice(3, 6), ids.slice(6, 8)]);

    // Backwards from past the oldest: the pages before it, each in list order, newest page last.
    const backwards = await walk(apiKey, '/v1/charges?limit=3', 'ending_before', 'id', ids[7]!);
    expect(backwards).toEqual([ids.slice(4, 7), ids.slice(1, 4), ids.slice(0, 1)]);
    expect(backwards.reverse().flat()).toEqual(ids.slice(0, 7));

    // An idempotency key still names the same charge as its id.
    expect(await walk(apiKey, '/v1/charges?limit=3', 'starting_after', 'idempotency_key')).toEqual(forwards);
    const byKey = await api.request(`/v1/charges?limit=3&ending_before=${encodeURIComponent(keys[5]!)}`, { apiKey });
    expect(byKey.body.data.map((c: { id: string }) => c.id)).toEqual(ids.slice(2, 5));
    expect(byKey.body.has_more).toBe(true);
    // Filters and cursors together: the cursor positions, the filter chooses.
    const filtered = await api.request(`/v1/charges?status=succeeded&limit=100&starting_after=${ids[5]}`, { apiKey });
    expect(filtered.body.data.map((c: { id: string }) => c.id)).toEqual(ids.slice(6));
  });

  it("the official stripe SDK's auto-pagination gets all 8 charges once, forwards and backwards", async () => {
    const { apiKey, ids } = await tenantWithCharges('sdk-pages', 8);
    const { hostname, port, protocol } = new URL(api.baseUrl);
    const stripe = new Stripe(apiKey, { host: hostname, port: Number(port), protocol: protocol.replace(':', '') as 'http', maxNetworkRetries: 0 });
    const forwards = await stripe.charges.list({ limit: 3 }).autoPagingToArray({ limit: 100 });
    expect(forwards.map((charge) => charge.id)).toEqual(ids);
    // Reverse iteration: from before the oldest, the SDK pages with the first object's id.
    const backwards = await stripe.charges.list({ limit: 3, ending_before: ids[7]! }).autoPagingToArray({ limit: 100 });
    expect(backwards.map((charge) => charge.id).sort()).toEqual(ids.slice(0, 7).sort());
    expect(new Set(backwards.map((charge) => charge.id)).size).toBe(7);
  });

  it('a cursor that names no charge of this tenant is a 400 naming the parameter, never an empty page; both cursors at once too', async () => {
    const { apiKey, ids } = await tenantWithCharges('bad-cursor', 1);
    const other = await tenantWithCharges('bad-cursor-other', 1);
    for (const [parameter, value] of [
      ['starting_after', 'ch_000000000000000000000000'],
      ['ending_before', 'never-used-key'],
      // Another tenant's charge, by id and by key: not this tenant's list.
      ['starting_after', other.ids[0]!],
      ['ending_before', other.keys[0]!],
    ] as const) {
      expectRefused(await api.request(`/v1/charges?${parameter}=${encodeURIComponent(value)}`, { apiKey }), [parameter], /names no charge/);
    }
    expectRefused(await api.request(`/v1/charges?starting_after=${ids[0]}&ending_before=${ids[0]}`, { apiKey }), ['starting_after', 'ending_before']);
  });
});

describe('lists of refunds and accounts', () => {
  it("a charge's refunds, oldest first, in pages by re_ id or refund key both ways; a cursor of another charge is a 400; the tenant's refunds newest first", async () => {
    const { tenant, apiKey, keys } = await tenantWithCharges('refund-pages', 2);
    const chargeKey = keys[0]!;
    const path = `/v1/charges/${encodeURIComponent(chargeKey)}/refunds`;
    const refundIds: string[] = [];
    const refundKeys: string[] = [];
    for (let i = 0; i < 5; i += 1) {
      const refundKey = newKey(`refund-${i}`);
      const made = await api.request(path, { apiKey, body: { amount: 1 }, headers: { 'idempotency-key': refundKey } });
      expect(made.status, made.text).toBe(201);
      expect(made.body).toMatchObject({ object: 'refund', id: expect.stringMatching(/^re_/), provider_refund_id: null });
      refundIds.push(made.body.id);
      refundKeys.push(refundKey);
    }
    const forwards = await walk(apiKey, `${path}?limit=2`, 'starting_after', 'id');
    expect(forwards).toEqual([refundIds.slice(0, 2), refundIds.slice(2, 4), refundIds.slice(4)]);
    expect(await walk(apiKey, `${path}?limit=2`, 'starting_after', 'idempotency_key')).toEqual(forwards);
    const backwards = await walk(apiKey, `${path}?limit=2`, 'ending_before', 'id', refundIds[4]!);
    expect(backwards).toEqual([refundIds.slice(2, 4), refundIds.slice(0, 2)]);
    // Without a limit, the first 20: all five, nothing more.
    const all = await api.request(path, { apiKey });
    expect(all.body).toMatchObject({ object: 'list', has_more: false, url: path });
    expect(all.body.data.map((r: { id: string }) => r.id)).toEqual(refundIds);

    // GET /v1/refunds?charge=, as Stripe's clients ask: by the charge's id or key, the same pages.
    const chargeId = chargeIdFor(tenant, chargeKey);
    expect(await walk(apiKey, `/v1/refunds?charge=${chargeId}&limit=2`, 'starting_after', 'id')).toEqual(forwards);
    expect(await walk(apiKey, `/v1/refunds?charge=${encodeURIComponent(chargeKey)}&limit=2`, 'ending_before', 'id', refundIds[4]!)).toEqual(backwards);
    const { hostname, port, protocol } = new URL(api.baseUrl);
    const stripe = new Stripe(apiKey, { host: hostname, port: Number(port), protocol: protocol.replace(':', '') as 'http', maxNetworkRetries: 0 });
    const bySdk = await stripe.refunds.list({ charge: chargeId, limit: 2 }).autoPagingToArray({ limit: 100 });
    expect(bySdk.map((refund) => refund.id)).toEqual(refundIds);
    const stranger = await tenantWithCharges('refund-pages-other', 1);
    expectRefused(await api.request(`/v1/refunds?charge=${stranger.ids[0]}`, { apiKey }), ['charge'], /names no charge of this tenant/);

    // The other charge's refund: not a refund of this charge.
    const otherPath = `/v1/charges/${encodeURIComponent(keys[1]!)}/refunds`;
    const otherRefund = await api.request(otherPath, { apiKey, body: {}, headers: { 'idempotency-key': newKey() } });
    expect(otherRefund.status, otherRefund.text).toBe(201);
    expectRefused(await api.request(`${path}?starting_after=${otherRefund.body.id}`, { apiKey }), ['starting_after'], /names no refund/);

    // GET /v1/refunds without `charge`: every refund of the tenant, newest first, both charges', in
    // pages by re_ id both ways, as Stripe's SDK iterates it; another tenant's refunds never appear.
    const strangerRefund = await api.request(`/v1/charges/${encodeURIComponent(stranger.keys[0]!)}/refunds`, {
      apiKey: stranger.apiKey, body: {}, headers: { 'idempotency-key': newKey() },
    });
    expect(strangerRefund.status, strangerRefund.text).toBe(201);
    const newestFirst = [otherRefund.body.id as string, ...[...refundIds].reverse()];
    const tenantPages = await walk(apiKey, '/v1/refunds?limit=4', 'starting_after', 'id');
    expect(tenantPages).toEqual([newestFirst.slice(0, 4), newestFirst.slice(4)]);
    expect(await walk(apiKey, '/v1/refunds?limit=4', 'ending_before', 'id', newestFirst[5]!)).toEqual([newestFirst.slice(1, 5), newestFirst.slice(0, 1)]);
    const allBySdk = await stripe.refunds.list({ limit: 2 }).autoPagingToArray({ limit: 100 });
    expect(allBySdk.map((refund) => refund.id)).toEqual(newestFirst);
    // Its cursor is a refund id of this tenant: a refund key (unique per charge only) or another tenant's refund is a 400.
    expectRefused(await api.request(`/v1/refunds?starting_after=${encodeURIComponent(refundKeys[0]!)}`, { apiKey }), ['starting_after'], /names no refund of this tenant/);
    expectRefused(await api.request(`/v1/refunds?ending_before=${strangerRefund.body.id}`, { apiKey }), ['ending_before'], /names no refund of this tenant/);
    expectRefused(await api.request(`${path}?limit=0`, { apiKey }), ['limit']);
    expectRefused(await api.request(`${path}?status=succeeded`, { apiKey }), ['status']);
  });

  it('accounts: agent keys list the accounts they may name, admin keys the system accounts too, in pages by account id', async () => {
    const tenant = await fundedTenant(h, { label: 'account-list' });
    const agentKey = await api.keyFor(tenant);
    const adminKey = await api.keyFor(tenant, 'admin');
    for (const id of ['a1', 'a2', 'a3']) {
      const opened = await api.request('/v1/accounts', { apiKey: adminKey, body: { id, currency: 'USD' }, headers: { 'idempotency-key': newKey() } });
      expect(opened.status, opened.text).toBe(201);
    }
    const agentPages = await walk(agentKey, '/v1/accounts?limit=2', 'starting_after', 'id');
    expect(agentPages).toEqual([['a3', 'a2'], ['a1', 'payee'], ['payer']]);
    const adminAll = (await walk(adminKey, '/v1/accounts?limit=100', 'starting_after', 'id')).flat();
    // The deposits that funded the payer came from the outside world's account.
    expect(adminAll.sort()).toEqual(['@external/USD', 'a1', 'a2', 'a3', 'payee', 'payer'].sort());
    const backwards = await walk(agentKey, '/v1/accounts?limit=2', 'ending_before', 'id', 'payer');
    expect(backwards).toEqual([['a1', 'payee'], ['a3', 'a2']]);
    const page = await api.request('/v1/accounts?limit=1', { apiKey: agentKey });
    expect(page.body.data[0]).toMatchObject({ object: 'account', id: 'a3', currency: 'USD', posted: 0, available: 0 });
    // A system account is no cursor of an agent's list; an unknown account of no one's.
    expectRefused(await api.request('/v1/accounts?starting_after=%40external%2FUSD', { apiKey: agentKey }), ['starting_after'], /names no account/);
    expectRefused(await api.request('/v1/accounts?ending_before=nobody', { apiKey: adminKey }), ['ending_before'], /names no account/);
  });
});

describe('system accounts: readable by admin keys and the operator, never usable as payer or payee', () => {
  it('GET /v1/accounts/{id} percent-encoded: admin 200 with the balance, agent 403, unknown 404; refused as payer, payee and deposit target', async () => {
    const tenant = await fundedTenant(h, { label: 'system-read', payerMinor: 7_000 });
    const agentKey = await api.keyFor(tenant);
    const adminKey = await api.keyFor(tenant, 'admin');
    const external = await api.request('/v1/accounts/%40external%2FUSD', { apiKey: adminKey });
    expect(external.status, external.text).toBe(200);
    expect(external.body).toMatchObject({ object: 'account', id: '@external/USD', currency: 'USD', posted: -7_000, pending: 0, allow_overdraft: true });

    const refused = await api.request('/v1/accounts/%40external%2FUSD', { apiKey: agentKey });
    expect(refused.status, refused.text).toBe(403);
    expect(refused.body).toMatchObject({ type: 'forbidden', operation: 'system_accounts.read' });
    expect((await api.request('/v1/accounts/%40provider%2Fstripe%2FEUR', { apiKey: adminKey })).status).toBe(404);
    // Not a system account's shape: refused as any malformed id.
    expectRefused(await api.request('/v1/accounts/%40nothing', { apiKey: adminKey }), ['id']);

    for (const field of ['payer_account_id', 'payee_account_id']) {
      const charge = await api.request('/v1/charges', {
        apiKey: adminKey,
        body: chargeBody({ [field]: '@external/USD' }),
        headers: { 'idempotency-key': newKey() },
      });
      expectRefused(charge, [field]);
    }
    const deposit = await api.request('/v1/accounts/%40external%2FUSD/deposits', { apiKey: adminKey, body: { amount: 5 }, headers: { 'idempotency-key': newKey() } });
    expectRefused(deposit, ['id']);
    expect((await api.request('/v1/accounts/%40external%2FUSD', { apiKey: adminKey })).body.posted).toBe(-7_000);
  });

  it("the CLI's accounts show reads a system account's balance (the operator)", async () => {
    const tenant = await fundedTenant(h, { label: 'system-cli', payerMinor: 4_200 });
    const shown = await runCli(['accounts', 'show', '@external/USD', '--tenant', tenant, '--json']);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.json).toMatchObject({ id: '@external/USD', posted: -4_200, currency: 'USD' });
    const unknown = await runCli(['accounts', 'show', '@provider/stripe/USD', '--tenant', tenant]);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toMatch(/no account @provider\/stripe\/USD/);
  });
});

describe('unknown query parameters and expand', () => {
  /** A value for each path parameter the document names: the route is reached, whether or not the object exists. */
  const pathValues: Record<string, string> = { key: 'some-key', refundKey: 'some-refund', id: 'payer', provider: 'stripe' };

  it('every route of the OpenAPI document refuses an unknown parameter with a 400 naming it, and expand[] saying it is not supported', async () => {
    const tenant = await fundedTenant(h, { label: 'unknown-query' });
    const apiKey = await api.keyFor(tenant, 'admin');
    const document = (await api.request('/openapi.json')).body as { paths: Record<string, Record<string, unknown>> };
    const walked: string[] = [];
    for (const [path, operations] of Object.entries(document.paths)) {
      for (const method of Object.keys(operations)) {
        const url = path.replace(/\{(\w+)\}/g, (_match, name: string) => {
          const value = pathValues[name];
          if (value === undefined) throw new Error(`no test value for path parameter ${name} of ${path}`);
          return value;
        });
        const body = method === 'get' ? {} : { body: {} };
        const unknown = await api.request(`${url}?chargeguard_unknown=1`, { method: method.toUpperCase(), apiKey, ...body });
        expectRefused(unknown, ['chargeguard_unknown'], /is not a known query parameter/);
        const expand = await api.request(`${url}?expand%5B%5D=data.customer`, { method: method.toUpperCase(), apiKey, ...body });
        expectRefused(expand, ['expand[]'], /expand is not supported; every object is returned whole/);
        walked.push(`${method.toUpperCase()} ${path}`);
      }
    }
    // The walk covered the routes that used to accept anything (single-object GETs) and the new lists.
    expect(walked).toEqual(
      expect.arrayContaining(['GET /v1/charges/{key}', 'GET /v1/accounts/{id}', 'GET /v1/accounts', 'GET /v1/charges/{key}/refunds', 'GET /v1/refunds', 'POST /v1/charges', 'GET /healthz']),
    );
    expect(walked.length).toBeGreaterThanOrEqual(15);
    expectRefused(await api.request('/v1/charges?expand=customer&limit=2', { apiKey }), ['expand'], /expand is not supported/);
    // Nothing was recorded by any of it.
    expect((await h.pool.query('SELECT count(*)::int AS n FROM charges WHERE tenant = $1', [tenant])).rows[0].n).toBe(0);
  });
});

describe('refunds in Temporal visibility', () => {
  it("a refund's workflow carries its charge's tenant, order and payer: ChargeTenant = 'x' finds the charge and its refund", async () => {
    const { tenant, apiKey, keys } = await tenantWithCharges(`visible`, 1);
    const chargeKey = keys[0]!;
    const refundKey = newKey('visible-refund');
    const made = await api.request(`/v1/charges/${encodeURIComponent(chargeKey)}/refunds`, { apiKey, body: { amount: 10 }, headers: { 'idempotency-key': refundKey } });
    expect(made.status, made.text).toBe(201);
    const refundId = refundWorkflowId(tenant, chargeKey, refundKey);
    // Visibility is eventually consistent: wait for it, with a deadline.
    const found = await waitFor(
      async () => {
        const ids: Array<{ id: string; type: string }> = [];
        for await (const execution of h.temporal.workflow.list({ query: `ChargeTenant = '${tenant}'` })) {
          ids.push({ id: execution.workflowId, type: execution.type });
        }
        return ids.some((execution) => execution.id === refundId) ? ids : null;
      },
      { timeoutMs: 30_000, what: 'the refund workflow in visibility under ChargeTenant' },
    );
    expect(found.map((execution) => execution.type).sort()).toEqual(['ChargeWorkflow', 'RefundWorkflow']);
    const byType = h.temporal.workflow.list({ query: `ChargeTenant = '${tenant}' AND WorkflowType = 'RefundWorkflow'` });
    const refunds: string[] = [];
    for await (const execution of byType) refunds.push(execution.workflowId);
    expect(refunds).toEqual([refundId]);
    // Another tenant's query does not see it.
    const none: string[] = [];
    for await (const execution of h.temporal.workflow.list({ query: `ChargeTenant = '${newTenant('nobody')}'` })) none.push(execution.workflowId);
    expect(none).toEqual([]);
  });
});

describe('the provider refund id on refunds of card charges', () => {
  // A worker of this file's own with the Stripe connector pointed at the stateful simulator: card
  // charges and their refunds go through it; the API reads what the ledger recorded.
  const taskQueue = `stripe-habits-${randomBytes(4).toString('hex')}`;
  let sim: StripeSimulator;
  let worker: Awaited<ReturnType<typeof startTestWorker>>;
  beforeAll(async () => {
    sim = await StripeSimulator.start({ port: 0 });
    const stripe = new StripeConnector({ apiKey: 'sk_test_chargeguard', webhookSecrets: ['whsec_test'], endpoint: sim.endpoint, maxNetworkRetries: 0, requestTimeoutMs: 5_000 });
    worker = await startTestWorker({ taskQueue, pool: h.pool, providers: { stripe }, holdSweeper: false });
  });
  afterAll(async () => {
    await worker?.stop();
    await sim?.stop();
  });

  it("shows Stripe's re_ id as provider_refund_id (from the ledger), and the clearing account's balance to admin keys", async () => {
    const tenant = await fundedTenant(h, { label: 'provider-refund-id' });
    const client = h.clientFor({ taskQueue });
    const chargeKey = newKey('card');
    const charged = await client.charge(tenant, chargeKey, {
      order_id: `order-${randomBytes(4).toString('hex')}`,
      payment_method: 'pm_card_visa',
      payee_account_id: 'payee',
      amount: 900,
      currency: 'USD',
    });
    expect(charged.charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 900 });
    const refundKey = newKey('card-refund');
    const refunded = await client.refund(tenant, chargeKey, refundKey, { amount: 400 });
    expect(refunded.refund.status).toBe('succeeded');
    const atProvider = [...sim.payments.refunds.values()].filter((refund) => refund.paymentIntent === charged.charge.provider!.paymentId);
    expect(atProvider).toHaveLength(1);
    expect(atProvider[0]!.id).toMatch(/^re_/);

    const apiKey = await api.keyFor(tenant);
    const path = `/v1/charges/${encodeURIComponent(chargeKey)}/refunds`;
    const one = await api.request(`${path}/${encodeURIComponent(refundKey)}`, { apiKey });
    expect(one.status, one.text).toBe(200);
    expect(one.body).toMatchObject({ object: 'refund', amount: 400, status: 'succeeded', provider_refund_id: atProvider[0]!.id });
    // The refund's own id is chargeguard's, not the provider's.
    expect(one.body.id).not.toBe(atProvider[0]!.id);
    const list = await api.request(path, { apiKey });
    expect(list.body.data).toEqual([one.body]);

    const adminKey = await api.keyFor(tenant, 'admin');
    const clearing = await api.request('/v1/accounts/%40provider%2Fstripe%2FUSD', { apiKey: adminKey });
    expect(clearing.status, clearing.text).toBe(200);
    // What Stripe owes the tenant: captured 900, refunded 400.
    expect(clearing.body).toMatchObject({ id: '@provider/stripe/USD', posted: -500, pending: 0, currency: 'USD' });
    expect((await api.request('/v1/accounts/%40provider%2Fstripe%2FUSD', { apiKey })).status).toBe(403);
    const shown = await runCli(['accounts', 'show', '@provider/stripe/USD', '--tenant', tenant, '--json']);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.json).toMatchObject({ id: '@provider/stripe/USD', posted: -500 });
  });
});
