import { describe, expect, it } from 'vitest';
import { countLedger } from '../src/ledger/reports.js';
import { wireChargeSchema } from '../src/service/wire.js';
import { wireProblemSchema } from '../src/http/problem.js';
import { balanceOf, captureCount, chargeBody, expectLedgerInvariants, newKey, useHarness } from './support/harness.js';
import { fundedApiTenant, useApi } from './support/api.js';

const h = useHarness();
const api = useApi();

const fundedTenant = (label: string, payerMinor = 100_000) => fundedApiTenant(api, { label, payerMinor });

function postCharge(apiKey: string, key: string | null, body: unknown, headers: Record<string, string> = {}) {
  return api.request('/v1/charges', {
    method: 'POST',
    apiKey,
    body,
    headers: { ...(key === null ? {} : { 'idempotency-key': key }), ...headers },
  });
}

describe('POST /v1/charges', () => {
  it('201 on first completion, then 200 + Idempotent-Replayed with a byte-identical body', async () => {
    const { tenant, apiKey } = await fundedTenant('created');
    const key = newKey();
    const body = chargeBody({ amount: 2_500 });

    const first = await postCharge(apiKey, key, body);
    expect(first.status).toBe(201);
    expect(first.headers.get('content-type')).toMatch(/^application\/json/);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(first.headers.get('location')).toBe(`/v1/charges/${key}`);
    const charge = wireChargeSchema.parse(first.body);
    expect(charge).toMatchObject({ object: 'charge', idempotency_key: key, status: 'succeeded', amount: 2_500, amount_captured: 2_500, amount_refunded: 0, currency: 'USD', capture: 'automatic' });

    const again = await postCharge(apiKey, key, body);
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);

    const read = await api.request(`/v1/charges/${encodeURIComponent(key)}`, { apiKey });
    expect(read.status).toBe(200);
    expect(read.body).toEqual(first.body);

    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100_000 - 2_500);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('100 concurrent requests with the same key and body: one debit, 100 identical bodies, 99 replays', async () => {
    const { tenant, apiKey } = await fundedTenant('concurrent');
    const key = newKey();
    const body = chargeBody({ amount: 1_234 });

    const responses = await Promise.all(Array.from({ length: 100 }, () => postCharge(apiKey, key, body)));

    expect(responses.map((r) => r.status).sort()).toEqual([...Array(99).fill(200), 201]);
    expect(responses.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(99);
    expect(new Set(responses.map((r) => r.text)).size).toBe(1);
    expect(wireChargeSchema.parse(responses[0]!.body).status).toBe('succeeded');
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100_000 - 1_234);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('the same key with a different body: 422 idempotency_conflict, nothing runs, the original still replays', async () => {
    const { tenant, apiKey } = await fundedTenant('mismatch');
    const key = newKey();
    const body = chargeBody({ amount: 1_000 });
    const first = await postCharge(apiKey, key, body);
    expect(first.status).toBe(201);

    const reused = await postCharge(apiKey, key, { ...body, amount: 1_001 });
    expect(reused.status).toBe(422);
    expect(reused.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(wireProblemSchema.parse(reused.body)).toMatchObject({ type: 'idempotency_conflict', status: 422 });
    expect(reused.body.detail).toContain(key);

    const original = await postCharge(apiKey, key, body);
    expect(original.status).toBe(200);
    expect(original.text).toBe(first.text);
    const metrics = (await api.request('/metrics')).text;
    expect(metrics).toMatch(/^chargeguard_idempotency_conflicts_total [1-9]/m);
    expect(metrics).toMatch(/^chargeguard_charge_replays_total [1-9]/m);
    expect(metrics).toMatch(/^chargeguard_charges_started_total [1-9]/m);
    expect(metrics).toMatch(/^chargeguard_http_request_duration_seconds_count\{method="POST",route="\/v1\/charges",status_code="422"\} [1-9]/m);
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100_000 - 1_000);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('a decline is a decision: 201 declined, replayed as declined after the payer is funded', async () => {
    const { tenant, apiKey } = await fundedTenant('declined', 500);
    const key = newKey();
    const body = chargeBody({ amount: 501 });
    const first = await postCharge(apiKey, key, body);
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ status: 'declined', decline_code: 'insufficient_funds', amount_captured: 0 });

    // Depositing creates money: an admin key's job, not the charging agent's.
    const adminKey = await api.keyFor(tenant, 'admin');
    const funded = await api.request('/v1/accounts/payer/deposits', { apiKey: adminKey, body: { amount: 10_000 }, headers: { 'idempotency-key': newKey('dep') } });
    expect(funded.status).toBe(201);
    const again = await postCharge(apiKey, key, body);
    expect(again.status).toBe(200);
    expect(again.text).toBe(first.text);
    expect(await captureCount(h.pool, tenant, key)).toBe(0);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_500);
    const metrics = await api.request('/metrics');
    expect(metrics.text).toMatch(/^chargeguard_charges_declined_total [1-9]/m);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('Prefer: wait=0 answers 202 with Location and Retry-After; the Location later shows the outcome', async () => {
    const { tenant, apiKey } = await fundedTenant('accepted');
    const key = `order/42?retry#${newKey()}`; // keys may hold URL-special characters
    const body = chargeBody({ amount: 700 });
    const accepted = await postCharge(apiKey, key, body, { prefer: 'wait=0' });
    expect(accepted.status).toBe(202);
    expect(accepted.headers.get('retry-after')).toBe('1');
    expect(accepted.headers.get('preference-applied')).toBe('wait=0');
    const location = accepted.headers.get('location')!;
    expect(location).toBe(`/v1/charges/${encodeURIComponent(key)}`);
    expect(wireChargeSchema.parse(accepted.body).idempotency_key).toBe(key);

    const done = await postCharge(apiKey, key, body);
    expect(done.status).toBe(200);
    expect(done.headers.get('idempotent-replayed')).toBe('true');
    expect(done.body.status).toBe('succeeded');
    const polled = await api.request(location, { apiKey });
    expect(polled.status).toBe(200);
    expect(polled.body).toEqual(done.body);
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('Idempotency-Key missing, empty, too long or not visible ASCII: 400 naming the header, nothing written', async () => {
    const { tenant, apiKey } = await fundedTenant('badkey');
    const body = chargeBody();
    for (const key of [null, '', 'k'.repeat(256), 'has space']) {
      const response = await postCharge(apiKey, key, body);
      expect(response.status, `key ${JSON.stringify(key)}`).toBe(400);
      expect(response.body.type).toBe('validation_error');
      expect(response.body.errors[0].field).toMatch(/idempotency/i);
    }
    expect((await countLedger(h.pool, tenant)).charges).toBe(0);
    await expectLedgerInvariants(h.pool, tenant);
  });
});

describe('cancel and capture', () => {
  it('manual capture: reserve (201), capture part (200), the rest released; cancel after success is 409', async () => {
    const { tenant, apiKey } = await fundedTenant('manual');
    const key = newKey();
    const created = await postCharge(apiKey, key, chargeBody({ amount: 3_000, capture: 'manual' }));
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ status: 'reserved', capture: 'manual', amount_captured: 0 });
    expect((await balanceOf(h.pool, tenant, 'payer')).pendingMinor).toBe(3_000);

    const path = `/v1/charges/${encodeURIComponent(key)}`;
    const captured = await api.request(`${path}/capture`, { apiKey, body: { amount: 2_000 } });
    expect(captured.status).toBe(200);
    expect(captured.body).toMatchObject({ status: 'succeeded', amount_captured: 2_000 });
    const repeated = await api.request(`${path}/capture`, { apiKey, body: { amount: 2_000 } });
    expect(repeated.status).toBe(200);
    expect(repeated.body.amount_captured).toBe(2_000);

    const cancel = await api.request(`${path}/cancel`, { apiKey, method: 'POST' });
    expect(cancel.status).toBe(409);
    expect(cancel.body).toMatchObject({ type: 'charge_state_conflict', reason: 'ChargeAlreadySucceeded' });
    expect(cancel.body.detail).toMatch(/refund/);

    const payer = await balanceOf(h.pool, tenant, 'payer');
    expect([payer.postedMinor, payer.pendingMinor]).toEqual([100_000 - 2_000, 0]);
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('cancel of a reserved charge releases the hold; a repeated cancel answers the same; capture after it is 409', async () => {
    const { tenant, apiKey } = await fundedTenant('cancel');
    const key = newKey();
    expect((await postCharge(apiKey, key, chargeBody({ amount: 900, capture: 'manual' }))).status).toBe(201);
    const path = `/v1/charges/${encodeURIComponent(key)}`;
    // An empty body with a JSON content type is how curl sends a bare POST.
    const cancelled = await api.request(`${path}/cancel`, { apiKey, method: 'POST', rawBody: '', headers: { 'content-type': 'application/json' } });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body.status).toBe('cancelled');
    const again = await api.request(`${path}/cancel`, { apiKey, method: 'POST' });
    expect(again.status).toBe(200);
    expect(again.body.status).toBe('cancelled');
    const capture = await api.request(`${path}/capture`, { apiKey, method: 'POST' });
    expect(capture.status).toBe(409);
    expect(capture.body.type).toBe('charge_state_conflict');
    const payer = await balanceOf(h.pool, tenant, 'payer');
    expect([payer.postedMinor, payer.pendingMinor]).toEqual([100_000, 0]);
    expect(await captureCount(h.pool, tenant, key)).toBe(0);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('unknown charge key: 404 for get, cancel and capture', async () => {
    const { tenant, apiKey } = await fundedTenant('unknown');
    const path = `/v1/charges/${newKey('nobody')}`;
    for (const [method, suffix] of [['GET', ''], ['POST', '/cancel'], ['POST', '/capture']] as const) {
      const response = await api.request(`${path}${suffix}`, { apiKey, method });
      expect(response.status, `${method} ${suffix}`).toBe(404);
      expect(response.body.type).toBe('not_found');
    }
    await expectLedgerInvariants(h.pool, tenant);
  });
});
