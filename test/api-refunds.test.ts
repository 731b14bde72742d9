import { describe, expect, it } from 'vitest';
import { wireRefundSchema } from '../src/service/wire.js';
import { balanceOf, captureCount, chargeBody, expectLedgerInvariants, newKey, newTenant, useHarness } from './support/harness.js';
import { fundedApiTenant, useApi } from './support/api.js';

const h = useHarness();
const api = useApi();

describe('POST /v1/charges/{key}/refunds', () => {
  it('partial refunds with their own keys: 201, replay 200 identical, 422 on reuse, 409 past the capture, 404 for another tenant', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'refund' });
    const otherKey = await api.keyFor(newTenant('refund-other'));
    const chargeKey = newKey('charge');
    const body = chargeBody({ amount: 3_000 });
    const created = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': chargeKey } });
    expect(created.status).toBe(201);
    const refunds = `/v1/charges/${encodeURIComponent(chargeKey)}/refunds`;

    const refundKey = newKey('refund');
    const first = await api.request(refunds, { apiKey, body: { amount: 1_000 }, headers: { 'idempotency-key': refundKey } });
    expect(first.status).toBe(201);
    expect(wireRefundSchema.parse(first.body)).toMatchObject({ object: 'refund', charge_id: created.body.id, amount: 1_000, status: 'succeeded' });
    expect(first.headers.get('location')).toBe(`${refunds}/${refundKey}`);
    const replay = await api.request(refunds, { apiKey, body: { amount: 1_000 }, headers: { 'idempotency-key': refundKey } });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.text).toBe(first.text);
    const reused = await api.request(refunds, { apiKey, body: { amount: 999 }, headers: { 'idempotency-key': refundKey } });
    expect(reused.status).toBe(422);
    expect(reused.body.type).toBe('idempotency_conflict');

    const tooMuch = await api.request(refunds, { apiKey, body: { amount: 2_001 }, headers: { 'idempotency-key': newKey('refund') } });
    expect(tooMuch.status).toBe(409);
    expect(tooMuch.body.type).toBe('charge_state_conflict');
    const intruder = await api.request(refunds, { apiKey: otherKey, body: {}, headers: { 'idempotency-key': newKey('refund') } });
    expect(intruder.status).toBe(404);
    const missingKey = await api.request(refunds, { apiKey, body: {} });
    expect(missingKey.status).toBe(400);

    const rest = await api.request(refunds, { apiKey, body: {}, headers: { 'idempotency-key': newKey('refund') } });
    expect(rest.status).toBe(201);
    expect(rest.body.amount).toBe(2_000);

    const charge = await api.request(`/v1/charges/${encodeURIComponent(chargeKey)}`, { apiKey });
    expect(charge.body).toMatchObject({ status: 'refunded', amount_captured: 3_000, amount_refunded: 3_000 });
    // A replay of the create is the create's original answer, not the charge as it is now.
    const createReplay = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': chargeKey } });
    expect(createReplay.status).toBe(200);
    expect(createReplay.text).toBe(created.text);
    const list = await api.request(refunds, { apiKey });
    expect(list.body.object).toBe('list');
    expect(list.body.data.filter((r: { status: string }) => r.status === 'succeeded').map((r: { amount: number }) => r.amount)).toEqual([1_000, 2_000]);

    expect(await captureCount(h.pool, tenant, chargeKey)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000);
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(0);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('refund of a charge that was never captured: 409, nothing moves', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'refund-held' });
    const chargeKey = newKey('charge');
    const created = await api.request('/v1/charges', { apiKey, body: chargeBody({ amount: 500, capture: 'manual' }), headers: { 'idempotency-key': chargeKey } });
    expect(created.body.status).toBe('reserved');
    const refund = await api.request(`/v1/charges/${encodeURIComponent(chargeKey)}/refunds`, { apiKey, body: {}, headers: { 'idempotency-key': newKey() } });
    expect(refund.status).toBe(409);
    const cancelled = await api.request(`/v1/charges/${encodeURIComponent(chargeKey)}/cancel`, { apiKey, method: 'POST' });
    expect(cancelled.body.status).toBe('cancelled');
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000);
    await expectLedgerInvariants(h.pool, tenant);
  });
});
