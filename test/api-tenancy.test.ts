import { describe, expect, it } from 'vitest';
import { revokeApiKey, listApiKeys } from '../src/auth/api-keys.js';
import { countLedger } from '../src/ledger/reports.js';
import { balanceOf, captureCount, chargeBody, expectLedgerInvariants, fundedTenant, newKey, useHarness } from './support/harness.js';
import { fundedApiTenant, useApi } from './support/api.js';

const h = useHarness();
const api = useApi();

describe('authentication and tenant scoping', () => {
  it('missing, malformed, wrong or revoked API keys are 401 and move nothing', async () => {
    const { tenant, apiKey: goodKey } = await fundedApiTenant(api, { label: 'auth' });
    const [record] = await listApiKeys(h.pool, tenant);
    const revokedKey = await api.keyFor(tenant);
    const revokedId = (await listApiKeys(h.pool, tenant)).find((k) => k.id !== record!.id)!.id;
    await revokeApiKey(h.pool, revokedId);

    const key = newKey();
    const attempts: Array<Record<string, string>> = [
      {},
      { authorization: 'Basic dXNlcjpwYXNz' },
      { authorization: 'Bearer' },
      { authorization: `Bearer ${goodKey}x` },
      { authorization: 'Bearer cgk_not-a-real-key' },
      { authorization: `Bearer ${revokedKey}` },
    ];
    for (const headers of attempts) {
      const response = await api.request('/v1/charges', { body: chargeBody(), headers: { ...headers, 'idempotency-key': key } });
      expect(response.status, JSON.stringify(headers)).toBe(401);
      expect(response.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(response.body).toMatchObject({ type: 'unauthorized', status: 401 });
      const deposit = await api.request('/v1/accounts/payer/deposits', { body: { amount: 1 }, headers: { ...headers, 'idempotency-key': key } });
      expect(deposit.status).toBe(401);
    }
    expect(await captureCount(h.pool, tenant, key)).toBe(0);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000);
    expect((await countLedger(h.pool, tenant)).charges).toBe(0);

    // The good key still works: the 401s were about the keys, not the route.
    const ok = await api.request('/v1/charges', { apiKey: goodKey, body: chargeBody({ amount: 100 }), headers: { 'idempotency-key': key } });
    expect(ok.status).toBe(201);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it("a tenant cannot read, cancel, capture or charge another tenant's charges and accounts: 404", async () => {
    const owner = await fundedTenant(h, { label: 'owner' });
    const intruder = await fundedTenant(h, { label: 'intruder' });
    const ownerKey = await api.keyFor(owner);
    const intruderKey = await api.keyFor(intruder);
    const chargeKey = newKey();
    const created = await api.request('/v1/charges', {
      apiKey: ownerKey,
      body: chargeBody({ amount: 1_500, capture: 'manual' }),
      headers: { 'idempotency-key': chargeKey },
    });
    expect(created.status).toBe(201);

    const path = `/v1/charges/${encodeURIComponent(chargeKey)}`;
    for (const [method, suffix, body] of [
      ['GET', '', undefined],
      ['POST', '/cancel', undefined],
      ['POST', '/capture', { amount: 1_500 }],
    ] as const) {
      const response = await api.request(`${path}${suffix}`, { apiKey: intruderKey, method, body });
      expect(response.status, `${method} ${suffix}`).toBe(404);
      expect(response.body.type).toBe('not_found');
    }
    const account = await api.request('/v1/accounts/payer', { apiKey: intruderKey });
    expect(account.body.posted).toBe(10_000); // the intruder's own "payer", not the owner's
    const ownerAccount = await api.request('/v1/accounts/payer', { apiKey: ownerKey });
    expect(ownerAccount.body).toMatchObject({ posted: 10_000, pending: 1_500, available: 8_500 });

    // The same key under the intruder is the intruder's own, separate charge.
    const own = await api.request('/v1/charges', {
      apiKey: intruderKey,
      body: chargeBody({ amount: 10 }),
      headers: { 'idempotency-key': chargeKey },
    });
    expect(own.status).toBe(201);
    expect(own.body.id).not.toBe(created.body.id);

    const ownerList = await api.request('/v1/charges?limit=10', { apiKey: ownerKey });
    expect(ownerList.body).toMatchObject({ object: 'list', has_more: false });
    expect(ownerList.body.data.map((c: { id: string }) => c.id)).toEqual([created.body.id]);
    const intruderList = await api.request(`/v1/charges?order_id=${created.body.order_id}`, { apiKey: intruderKey });
    expect(intruderList.body.data).toEqual([]);
    const badLimit = await api.request('/v1/charges?limit=1000', { apiKey: ownerKey });
    expect(badLimit.status).toBe(400);
    expect(badLimit.body.errors[0].field).toBe('limit');

    const stillReserved = await api.request(path, { apiKey: ownerKey });
    expect(stillReserved.body.status).toBe('reserved');
    const cancelled = await api.request(`${path}/cancel`, { apiKey: ownerKey, method: 'POST' });
    expect(cancelled.body.status).toBe('cancelled');
    expect((await balanceOf(h.pool, owner, 'payer')).postedMinor).toBe(10_000);
    expect((await balanceOf(h.pool, intruder, 'payer')).postedMinor).toBe(10_000 - 10);
    await expectLedgerInvariants(h.pool, owner);
    await expectLedgerInvariants(h.pool, intruder);
  });
});
