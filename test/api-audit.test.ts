import { describe, expect, it } from 'vitest';
import { createApiKey } from '../src/auth/api-keys.js';
import { wireChargeSchema, wireRefundSchema } from '../src/service/wire.js';
import { chargeBody, fundedTenant, newKey, useHarness, waitFor } from './support/harness.js';
import { useApi } from './support/api.js';

const h = useHarness();
const api = useApi();

/** A tenant with an agent key and an admin key whose ids the test knows. */
async function tenantWithKeys(label: string): Promise<{ tenant: string; agent: { key: string; id: string }; admin: { key: string; id: string } }> {
  const tenant = await fundedTenant(h, { label, payerMinor: 100_000 });
  const agent = await createApiKey(h.pool, tenant, 'audit agent', 'agent');
  const admin = await createApiKey(h.pool, tenant, 'audit admin', 'admin');
  return { tenant, agent: { key: agent.key, id: agent.record.id }, admin: { key: admin.key, id: admin.record.id } };
}

function createCharge(apiKey: string, key: string, body: unknown, headers: Record<string, string> = {}) {
  return api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': key, ...headers } });
}

describe('audit fields: created_by_key_id is shown to admin keys only', () => {
  it('charges: on create (201, 200 replay, 202), get and list; never to an agent key', async () => {
    const { tenant, agent, admin } = await tenantWithKeys('audit-charges');
    const byAgent = newKey('by-agent');
    const byAdmin = newKey('by-admin');
    const agentBody = chargeBody({ amount: 100 });
    const adminBody = chargeBody({ amount: 200 });

    const agentCreate = await createCharge(agent.key, byAgent, agentBody);
    expect(agentCreate.status).toBe(201);
    expect(agentCreate.body).not.toHaveProperty('created_by_key_id');
    const adminCreate = await createCharge(admin.key, byAdmin, adminBody);
    expect(adminCreate.status).toBe(201);
    expect(wireChargeSchema.parse(adminCreate.body).created_by_key_id).toBe(admin.id);

    // A replay names the key that created the charge, not the one replaying it.
    const adminReplay = await createCharge(admin.key, byAgent, agentBody);
    expect(adminReplay.status).toBe(200);
    expect(adminReplay.body.created_by_key_id).toBe(agent.id);
    const agentReplay = await createCharge(agent.key, byAdmin, adminBody);
    expect(agentReplay.status).toBe(200);
    expect(agentReplay.body).not.toHaveProperty('created_by_key_id');

    // Still processing (202): the pending charge names the key whose request started it.
    const pendingByAdmin = newKey('pending-admin');
    const adminPending = await createCharge(admin.key, pendingByAdmin, chargeBody({ amount: 300 }), { prefer: 'wait=0' });
    expect(adminPending.status).toBe(202);
    expect(adminPending.body.created_by_key_id).toBe(admin.id);
    const agentPending = await createCharge(agent.key, newKey('pending-agent'), chargeBody({ amount: 300 }), { prefer: 'wait=0' });
    expect(agentPending.status).toBe(202);
    expect(agentPending.body).not.toHaveProperty('created_by_key_id');

    // Through a server-issued token too: it is the same create.
    const issued = await api.request('/v1/idempotency-tokens', { method: 'POST', apiKey: admin.key });
    const byToken = await api.request('/v1/charges', { apiKey: admin.key, body: chargeBody({ amount: 50 }), headers: { 'idempotency-token': issued.body.token } });
    expect(byToken.status).toBe(201);
    expect(byToken.body.created_by_key_id).toBe(admin.id);

    // The operator (the command line, no key): null, so an admin can tell "nobody's key" from "not shown".
    const byOperator = newKey('by-operator');
    expect((await h.client.charge(tenant, byOperator, chargeBody({ amount: 10 }))).completed).toBe(true);

    for (const [key, creator] of [[byAgent, agent.id], [byAdmin, admin.id], [byOperator, null]] as const) {
      const asAdmin = await api.request(`/v1/charges/${encodeURIComponent(key)}`, { apiKey: admin.key });
      expect(asAdmin.body.created_by_key_id, key).toBe(creator);
      const asAgent = await api.request(`/v1/charges/${encodeURIComponent(key)}`, { apiKey: agent.key });
      expect(asAgent.status).toBe(200);
      expect(asAgent.body, key).not.toHaveProperty('created_by_key_id');
    }

    // Listed once every charge has its ledger row (the two that answered 202 included).
    const listedByAdmin = await waitFor(async () => {
      const page = await api.request('/v1/charges?limit=100', { apiKey: admin.key });
      return page.body?.data?.length === 6 ? page : null;
    }, { what: 'six charges in the listing' });
    const creators = Object.fromEntries(
      listedByAdmin.body.data.map((c: { idempotency_key: string; created_by_key_id?: string | null }) => [c.idempotency_key, c.created_by_key_id]),
    );
    expect(creators).toEqual({
      [byAgent]: agent.id,
      [byAdmin]: admin.id,
      [pendingByAdmin]: admin.id,
      [agentPending.body.idempotency_key]: agent.id,
      [issued.body.token]: admin.id,
      [byOperator]: null,
    });
    const listedByAgent = await api.request('/v1/charges?limit=100', { apiKey: agent.key });
    expect(listedByAgent.body.data).toHaveLength(6);
    for (const charge of listedByAgent.body.data) expect(charge).not.toHaveProperty('created_by_key_id');
    // Filters go through the same view.
    const succeeded = await api.request(`/v1/charges?status=succeeded&order_id=${encodeURIComponent(adminBody.order_id as string)}`, { apiKey: admin.key });
    expect(succeeded.body.data).toEqual([expect.objectContaining({ idempotency_key: byAdmin, created_by_key_id: admin.id })]);
  });

  it('refunds: on create (201, 200 replay), get and list; never to an agent key', async () => {
    const { agent, admin } = await tenantWithKeys('audit-refunds');
    const chargeKey = newKey('charge');
    expect((await createCharge(agent.key, chargeKey, chargeBody({ amount: 3_000 }))).status).toBe(201);
    const refunds = `/v1/charges/${encodeURIComponent(chargeKey)}/refunds`;

    const agentRefundKey = newKey('refund-agent');
    const agentRefund = await api.request(refunds, { apiKey: agent.key, body: { amount: 1_000 }, headers: { 'idempotency-key': agentRefundKey } });
    expect(agentRefund.status).toBe(201);
    expect(agentRefund.body).not.toHaveProperty('created_by_key_id');
    const adminRefundKey = newKey('refund-admin');
    const adminRefund = await api.request(refunds, { apiKey: admin.key, body: { amount: 500 }, headers: { 'idempotency-key': adminRefundKey } });
    expect(adminRefund.status).toBe(201);
    expect(wireRefundSchema.parse(adminRefund.body).created_by_key_id).toBe(admin.id);

    const adminReplay = await api.request(refunds, { apiKey: admin.key, body: { amount: 1_000 }, headers: { 'idempotency-key': agentRefundKey } });
    expect(adminReplay.status).toBe(200);
    expect(adminReplay.body.created_by_key_id).toBe(agent.id);
    const agentReplay = await api.request(refunds, { apiKey: agent.key, body: { amount: 500 }, headers: { 'idempotency-key': adminRefundKey } });
    expect(agentReplay.status).toBe(200);
    expect(agentReplay.body).not.toHaveProperty('created_by_key_id');

    for (const [refundKey, creator] of [[agentRefundKey, agent.id], [adminRefundKey, admin.id]] as const) {
      const path = `${refunds}/${encodeURIComponent(refundKey)}`;
      expect((await api.request(path, { apiKey: admin.key })).body.created_by_key_id, refundKey).toBe(creator);
      const asAgent = await api.request(path, { apiKey: agent.key });
      expect(asAgent.status).toBe(200);
      expect(asAgent.body, refundKey).not.toHaveProperty('created_by_key_id');
    }

    const listedByAdmin = await api.request(refunds, { apiKey: admin.key });
    expect(listedByAdmin.body.data.map((r: { idempotency_key: string; created_by_key_id?: string }) => [r.idempotency_key, r.created_by_key_id])).toEqual([
      [agentRefundKey, agent.id],
      [adminRefundKey, admin.id],
    ]);
    const listedByAgent = await api.request(refunds, { apiKey: agent.key });
    expect(listedByAgent.body.data).toHaveLength(2);
    for (const refund of listedByAgent.body.data) expect(refund).not.toHaveProperty('created_by_key_id');
  });
});
