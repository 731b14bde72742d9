import { describe, expect, it } from 'vitest';
import { createApiKey } from '../src/auth/api-keys.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { mcpBatchMaxCalls } from '../src/domain/rate-limits.js';
import { readCharge } from '../src/ledger/charges.js';
import { allowedMcpOrigins } from '../src/mcp/http.js';
import { chargeBody, fundedTenant, newKey, useHarness, workflowExists } from './support/harness.js';
import { generousRateLimits, useApi, type TestResponse } from './support/api.js';
import { callTool, mcpOverHttp, structured } from './support/mcp.js';

const h = useHarness();
const allowedOrigin = 'https://app.example';
const api = useApi({ env: { ...generousRateLimits, MCP_ALLOWED_ORIGINS: `${allowedOrigin}, https://other.example` } });

/** A fresh agent key with its own limits, as `api-keys create --burst … --max-open-holds …` stores them. */
async function keyWith(tenant: string, limits: { ratePerSecond?: number; burst?: number; maxOpenHolds?: number }): Promise<string> {
  const { key, record } = await createApiKey(h.pool, tenant, 'mcp limited');
  await h.pool.query('UPDATE api_keys SET rate_limit_per_second = $2, rate_limit_burst = $3, max_open_holds = $4 WHERE id = $1', [
    record.id,
    limits.ratePerSecond ?? null,
    limits.burst ?? null,
    limits.maxOpenHolds ?? null,
  ]);
  return key;
}

/** One POST to /mcp with these JSON-RPC messages (a batch when there are several), as a 2025-03-26 client may send. */
function postMcp(apiKey: string, messages: unknown[], headers: Record<string, string> = {}): Promise<TestResponse> {
  return api.request('/mcp', {
    apiKey,
    body: messages.length === 1 ? messages[0] : messages,
    headers: { accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-03-26', ...headers },
  });
}

function toolCall(id: number, name: string, args: Record<string, unknown>) {
  return { jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } };
}

const balanceCall = (id: number) => toolCall(id, 'get_account_balance', { account_id: 'payer' });
const createCall = (id: number, key: string) => toolCall(id, 'create_charge', { idempotency_key: key, ...chargeBody({ amount: 100, capture: 'manual' }) });

function remainingOf(response: TestResponse): number {
  const match = /"key";r=(\d+)/.exec(response.headers.get('ratelimit') ?? '');
  expect(match, `RateLimit: ${response.headers.get('ratelimit')}`).not.toBeNull();
  return Number(match![1]);
}

describe('MCP over HTTP: limits', () => {
  it(`a batch of 40 tools/call is refused whole (over mcpBatchMaxCalls = ${mcpBatchMaxCalls}); none of it runs`, async () => {
    const tenant = await fundedTenant(h, { label: 'mcp-batch-40' });
    const key = await api.keyFor(tenant);
    const keys = Array.from({ length: 40 }, (_, i) => newKey(`batch-${i}`));
    const refused = await postMcp(key, keys.map((k, i) => createCall(i + 1, k)));
    expect(refused.status, refused.text).toBe(400);
    expect(refused.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
    expect(refused.body.error.message).toMatch(/a batch of 40 JSON-RPC messages; at most 20 \(mcpBatchMaxCalls\).*Nothing in it was run/);
    for (const k of [keys[0]!, keys[19]!, keys[39]!]) {
      expect(await readCharge(h.pool, tenant, k)).toBeNull();
      expect(await workflowExists(h, chargeWorkflowId(tenant, k))).toBe(false);
    }
    const rows = await h.pool.query('SELECT count(*)::int AS n FROM charges WHERE tenant = $1', [tenant]);
    expect(rows.rows[0].n).toBe(0);
  });

  it('every call of a batch costs a request token: 5 calls take 5; a batch the key cannot pay for is 429 and runs nothing', async () => {
    const tenant = await fundedTenant(h, { label: 'mcp-batch-cost' });
    const key = await keyWith(tenant, { ratePerSecond: 1, burst: 10 });
    const startedAt = Date.now();
    const single = await postMcp(key, [balanceCall(1)]);
    expect(single.status, single.text).toBe(200);
    const before = remainingOf(single);
    expect(before).toBe(9);

    const batch = await postMcp(key, [1, 2, 3, 4, 5].map(balanceCall));
    expect(batch.status, batch.text).toBe(200);
    expect(batch.body).toHaveLength(5);
    const after = remainingOf(batch);
    const refilled = Math.ceil((Date.now() - startedAt) / 1000);
    expect(after).toBeLessThanOrEqual(before - 5 + refilled);
    expect(after).toBeGreaterThanOrEqual(before - 5);

    // 12 calls: the hook's one token, then 11 more than the ~4 left: refused, none of them run.
    const chargeKeys = Array.from({ length: 12 }, (_, i) => newKey(`unpaid-${i}`));
    const unpaid = await postMcp(key, chargeKeys.map((k, i) => createCall(i + 1, k)));
    expect(unpaid.status, unpaid.text).toBe(429);
    expect(unpaid.body).toMatchObject({ type: 'rate_limited', scope: 'key' });
    expect(Number(unpaid.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(unpaid.headers.get('ratelimit-policy')).toMatch(/"key";q=10;w=10/);
    for (const k of chargeKeys) expect(await readCharge(h.pool, tenant, k)).toBeNull();
  });

  it('create_charge calls are checked against open holds, a batch\'s together: over the limit the whole POST is 429', async () => {
    const tenant = await fundedTenant(h, { label: 'mcp-holds' });
    const key = await keyWith(tenant, { maxOpenHolds: 2 });
    const tooMany = [newKey('mh-1'), newKey('mh-2'), newKey('mh-3')];
    const refused = await postMcp(key, tooMany.map((k, i) => createCall(i + 1, k)));
    expect(refused.status, refused.text).toBe(429);
    expect(refused.body).toMatchObject({ type: 'open_holds_exceeded', scope: 'key' });
    for (const k of tooMany) expect(await readCharge(h.pool, tenant, k)).toBeNull();

    const { client, transport } = mcpOverHttp(api.baseUrl, key);
    await client.connect(transport);
    try {
      for (const k of tooMany.slice(0, 2)) {
        const created = structured(await callTool(client, 'create_charge', { idempotency_key: k, ...chargeBody({ amount: 100, capture: 'manual' }) }));
        expect(created.charge.status).toBe('reserved');
      }
      await expect(callTool(client, 'create_charge', { idempotency_key: tooMany[2]!, ...chargeBody({ capture: 'manual' }) })).rejects.toThrow(/429/);
    } finally {
      await client.close();
    }
    expect(await readCharge(h.pool, tenant, tooMany[2]!)).toBeNull();
  });

  it('Origin: evil.example is 403 before anything runs, no Origin is served, a listed origin is served', async () => {
    const tenant = await fundedTenant(h, { label: 'mcp-origin' });
    const key = await api.keyFor(tenant);
    const chargeKey = newKey('rebound');
    const evil = await postMcp(key, [createCall(1, chargeKey)], { origin: 'https://evil.example' });
    expect(evil.status, evil.text).toBe(403);
    expect(evil.body).toMatchObject({ type: 'origin_not_allowed', status: 403 });
    expect(evil.body.detail).toMatch(/https:\/\/evil\.example.*MCP_ALLOWED_ORIGINS/);
    expect(await readCharge(h.pool, tenant, chargeKey)).toBeNull();
    expect((await postMcp(key, [balanceCall(1)], { origin: 'null' })).status).toBe(403);
    expect((await api.request('/mcp', { apiKey: key, headers: { origin: 'https://evil.example' } })).status).toBe(403);

    const none = await postMcp(key, [balanceCall(1)]);
    expect(none.status, none.text).toBe(200);
    expect(none.body.result.structuredContent.account.id).toBe('payer');
    const listed = await postMcp(key, [balanceCall(1)], { origin: allowedOrigin });
    expect(listed.status, listed.text).toBe(200);
    // Unset, the list is empty: every browser origin is refused.
    expect(allowedMcpOrigins('').size).toBe(0);
  });
});
