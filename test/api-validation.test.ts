import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { wireProblemSchema } from '../src/client/wire.js';
import { chargeBody, expectLedgerInvariants, newKey, newTenant, openAccount, openHarness, type Harness } from './support/harness.js';
import { openTestApi, type TestApi } from './api-support.js';

let h: Harness;
let api: TestApi;
const bodyLimitBytes = 4 * 1024;
beforeAll(async () => {
  h = await openHarness();
  api = await openTestApi({ bodyLimitBytes });
});
afterAll(async () => {
  await api?.close();
  await h?.close();
});

async function nothingWritten(tenant: string): Promise<void> {
  const charges = await h.pool.query('SELECT 1 FROM charges WHERE tenant = $1', [tenant]);
  expect(charges.rowCount).toBe(0);
  const transfers = await h.pool.query("SELECT 1 FROM transfers WHERE tenant = $1 AND kind <> 'deposit'", [tenant]);
  expect(transfers.rowCount).toBe(0);
  await expectLedgerInvariants(h.pool, tenant);
}

describe('malformed requests get a clear 4xx and write nothing', () => {
  it('bad bodies: each offending field is named', async () => {
    const tenant = newTenant('badbody');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    await openAccount(h.pool, tenant, 'payee-eur', { currency: 'EUR' });
    const apiKey = await api.keyFor(tenant);

    const cases: Array<[string, unknown, string, RegExp]> = [
      ['negative amount', chargeBody({ amount: -5 }), 'amount', /at least 1/],
      ['zero amount', chargeBody({ amount: 0 }), 'amount', /at least 1/],
      ['fractional amount', chargeBody({ amount: 10.5 }), 'amount', /integer/],
      ['huge amount', chargeBody({ amount: 1e13 }), 'amount', /at most/],
      ['amount as a string', chargeBody({ amount: '100' }), 'amount', /integer/],
      ['unknown currency', chargeBody({ currency: 'XYZ' }), 'currency', /ISO 4217/],
      ['lower-case currency', chargeBody({ currency: 'usd' }), 'currency', /upper-case/],
      ['missing order_id', { ...chargeBody(), order_id: undefined }, 'order_id', /required/],
      ['unknown field', chargeBody({ amout: 5 }), 'amout', /not a known field/],
      ['unknown payee', chargeBody({ payee_account_id: 'nobody' }), 'payee_account_id', /no account nobody/],
      ['currency mismatch', chargeBody({ payee_account_id: 'payee-eur' }), 'currency', /holds EUR/],
      ['payer is payee', chargeBody({ payee_account_id: 'payer' }), 'payee_account_id', /differ/],
      ['array body', [chargeBody()], 'body', /JSON object/],
    ];
    for (const [label, body, field, message] of cases) {
      const response = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': newKey() } });
      expect(response.status, label).toBe(400);
      expect(response.headers.get('content-type'), label).toMatch(/^application\/problem\+json/);
      const problem = wireProblemSchema.parse(response.body);
      expect(problem.type, label).toBe('validation_error');
      const named = problem.errors?.find((e) => e.field === field);
      expect(named, `${label}: ${JSON.stringify(problem.errors)}`).toBeDefined();
      expect(named!.message, label).toMatch(message);
    }
    await nothingWritten(tenant);
  });

  it('malformed JSON, wrong content type, oversized body: 400, 415, 413', async () => {
    const tenant = newTenant('badjson');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    const apiKey = await api.keyFor(tenant);
    const headers = { 'idempotency-key': newKey() };

    const malformed = await api.request('/v1/charges', { apiKey, rawBody: '{"amount": 10,', headers });
    expect(malformed.status).toBe(400);
    expect(malformed.body).toMatchObject({ type: 'malformed_json', status: 400 });

    const text = await api.request('/v1/charges', { apiKey, rawBody: 'amount=10', headers: { ...headers, 'content-type': 'text/plain' } });
    expect(text.status).toBe(415);
    expect(text.body.type).toBe('unsupported_media_type');

    const oversized = await api.request('/v1/charges', {
      apiKey,
      body: chargeBody({ description: 'x'.repeat(bodyLimitBytes) }),
      headers,
    });
    expect(oversized.status).toBe(413);
    expect(oversized.body.type).toBe('payload_too_large');

    const negativeDeposit = await api.request('/v1/accounts/payer/deposits', { apiKey, body: { amount: -1 }, headers });
    expect(negativeDeposit.status).toBe(400);
    expect(negativeDeposit.body.errors[0].field).toBe('amount');
    const depositWithoutKey = await api.request('/v1/accounts/payer/deposits', { apiKey, body: { amount: 1 } });
    expect(depositWithoutKey.status).toBe(400);
    expect(depositWithoutKey.body.errors[0].field).toBe('Idempotency-Key');
    const unknownRoute = await api.request('/v1/nothing', { apiKey });
    expect(unknownRoute.status).toBe(404);
    expect(unknownRoute.headers.get('content-type')).toMatch(/problem\+json/);

    const payer = await h.pool.query('SELECT posted_minor FROM accounts WHERE tenant = $1 AND id = $2', [tenant, 'payer']);
    expect(payer.rows[0].posted_minor).toBe(10_000);
    await nothingWritten(tenant);
  });

  it('accounts and deposits: create is idempotent, deposits are exactly-once per key or external_id', async () => {
    const tenant = newTenant('accounts');
    const apiKey = await api.keyFor(tenant);
    const createKey = newKey('acct');
    const created = await api.request('/v1/accounts', { apiKey, body: { currency: 'EUR' }, headers: { 'idempotency-key': createKey } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ object: 'account', currency: 'EUR', posted: 0, pending: 0, available: 0 });
    const id = created.body.id as string;
    const again = await api.request('/v1/accounts', { apiKey, body: { currency: 'EUR' }, headers: { 'idempotency-key': createKey } });
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(created.body);
    const reused = await api.request('/v1/accounts', { apiKey, body: { currency: 'USD' }, headers: { 'idempotency-key': createKey } });
    expect(reused.status).toBe(422);
    const named = await api.request('/v1/accounts', { apiKey, body: { currency: 'USD', id }, headers: { 'idempotency-key': newKey() } });
    expect(named.status).toBe(409);
    expect(named.body.type).toBe('account_conflict');

    const depositKey = newKey('dep');
    const path = `/v1/accounts/${id}/deposits`;
    const first = await api.request(path, { apiKey, body: { amount: 5_000 }, headers: { 'idempotency-key': depositKey } });
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ object: 'deposit', account_id: id, amount: 5_000, currency: 'EUR' });
    const replay = await api.request(path, { apiKey, body: { amount: 5_000 }, headers: { 'idempotency-key': depositKey } });
    expect(replay.status).toBe(200);
    expect(replay.body).toEqual(first.body);
    const mismatch = await api.request(path, { apiKey, body: { amount: 5_001 }, headers: { 'idempotency-key': depositKey } });
    expect(mismatch.status).toBe(422);
    expect(mismatch.body.type).toBe('idempotency_conflict');
    const webhook = { amount: 250, external_id: 'psp_evt_1' };
    const redeliveries = await Promise.all(Array.from({ length: 5 }, () => api.request(path, { apiKey, body: webhook })));
    expect(redeliveries.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 201]);
    const unknownAccount = await api.request('/v1/accounts/nobody/deposits', { apiKey, body: { amount: 1 }, headers: { 'idempotency-key': newKey() } });
    expect(unknownAccount.status).toBe(404);

    const balance = await api.request(`/v1/accounts/${id}`, { apiKey });
    expect(balance.body).toMatchObject({ posted: 5_250, pending: 0, available: 5_250 });
    await expectLedgerInvariants(h.pool, tenant);
  });
});
