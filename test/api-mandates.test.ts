import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { describe, expect, inject, it } from 'vitest';
import { createApiKey } from '../src/auth/api-keys.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { noMandate, type Mandate } from '../src/domain/mandate.js';
import { countLedger } from '../src/ledger/reports.js';
import {
  balanceOf,
  chargeBody,
  expectLedgerInvariants,
  fundedTenant,
  newKey,
  startTestWorker,
  testPayloadSettings,
  useHarness,
  workflowExists,
} from './support/harness.js';
import { useApi } from './support/api.js';
import { callTool, mcpOverHttp } from './support/mcp.js';
import { runCli as cli } from './support/cli.js';
import { formatReconcileReport, reconcile } from '../src/reconcile/index.js';

const h = useHarness();
// 50 distinct new keys at once: above the default admission bound (CHARGE_ADMISSION_MAX_IN_FLIGHT),
// which would refuse some with 503 overloaded before the mandate is judged; this file is about the mandate.
// Keys looked up on every request (API_KEY_CACHE_TTL_MS 0): a test here expires a key in the
// database after using it and expects the very next request to be refused.
const api = useApi({ env: { CHARGE_ADMISSION_MAX_IN_FLIGHT: '100', API_KEY_CACHE_TTL_MS: '0' } });

async function agentKey(tenant: string, mandate: Partial<Mandate>): Promise<{ key: string; id: string }> {
  const { key, record } = await createApiKey(h.pool, tenant, 'mandated agent', 'agent', { ...noMandate, ...mandate });
  return { key, id: record.id };
}

describe('mandates: what an agent key may charge', () => {
  it('a charge outside the mandate is a 403 mandate_exceeded naming the rule; nothing recorded, no workflow started', async () => {
    const tenant = await fundedTenant(h, { label: 'mandate-front' });
    const { key } = await agentKey(tenant, {
      maxAmountMinor: 1_000,
      dailyLimitMinor: 1_500,
      allowedPayeeAccountIds: ['payee'],
      currency: 'USD',
    });
    const before = await countLedger(h.pool, tenant);

    const attempts: Array<{ rule: string; body: Record<string, unknown>; detail: RegExp }> = [
      { rule: 'max_amount', body: chargeBody({ amount: 5_000 }), detail: /^amount 5000 exceeds this key's largest charge of 1000$/ },
      { rule: 'payees', body: chargeBody({ payee_account_id: 'elsewhere' }), detail: /^payee elsewhere is not among this key's payees \(payee\)$/ },
      { rule: 'currency', body: chargeBody({ currency: 'EUR' }), detail: /^currency EUR is not this key's currency USD$/ },
    ];
    for (const attempt of attempts) {
      const idempotencyKey = newKey(attempt.rule);
      const response = await api.request('/v1/charges', { apiKey: key, body: attempt.body, headers: { 'idempotency-key': idempotencyKey } });
      expect(response.status, attempt.rule).toBe(403);
      expect(response.headers.get('content-type'), attempt.rule).toMatch(/^application\/problem\+json/);
      expect(response.body, attempt.rule).toMatchObject({ type: 'mandate_exceeded', title: 'Mandate exceeded', status: 403, rule: attempt.rule });
      expect(response.body.detail, attempt.rule).toMatch(attempt.detail);
      expect(await workflowExists(h, chargeWorkflowId(tenant, idempotencyKey)), attempt.rule).toBe(false);
    }
    expect(await countLedger(h.pool, tenant)).toEqual(before);

    // A key whose daily limit is smaller than its largest charge: one charge over the limit never fits.
    const small = await agentKey(tenant, { dailyLimitMinor: 300 });
    const overDaily = await api.request('/v1/charges', { apiKey: small.key, body: chargeBody({ amount: 301 }), headers: { 'idempotency-key': newKey() } });
    expect(overDaily.status).toBe(403);
    expect(overDaily.body).toMatchObject({ type: 'mandate_exceeded', rule: 'daily_limit', detail: "amount 301 exceeds this key's daily limit of 300" });
    expect(await countLedger(h.pool, tenant)).toEqual(before);

    // Inside the mandate: charged, and the charge records the key (shown to admin keys only).
    const chargeKey = newKey('inside');
    const inside = await api.request('/v1/charges', { apiKey: key, body: chargeBody({ amount: 1_000 }), headers: { 'idempotency-key': chargeKey } });
    expect(inside.status, JSON.stringify(inside.body)).toBe(201);
    expect(inside.body.status).toBe('succeeded');
    expect(inside.body).not.toHaveProperty('created_by_key_id');
    const keyId = (await h.pool.query<{ id: string }>('SELECT id FROM api_keys WHERE tenant = $1 AND max_amount_minor = 1000', [tenant])).rows[0]!.id;
    const admin = await api.keyFor(tenant, 'admin');
    expect((await api.request(`/v1/charges/${chargeKey}`, { apiKey: admin })).body).toMatchObject({ created_by_key_id: keyId });
    expect((await api.request(`/v1/charges/${chargeKey}`, { apiKey: key })).body).not.toHaveProperty('created_by_key_id');

    // The rolling total: 1000 charged, so 600 more would exceed 1500. Refused as the other rules
    // are, before anything starts: a 403 naming daily_limit, nothing recorded, no workflow.
    const afterInside = await countLedger(h.pool, tenant);
    const overKey = newKey('over-total');
    const overTotal = await api.request('/v1/charges', { apiKey: key, body: chargeBody({ amount: 600 }), headers: { 'idempotency-key': overKey } });
    expect(overTotal.status, JSON.stringify(overTotal.body)).toBe(403);
    expect(overTotal.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(overTotal.body).toMatchObject({
      type: 'mandate_exceeded',
      status: 403,
      rule: 'daily_limit',
      detail: "amount 600 with the 1000 this key charged in the last 24 hours exceeds its daily limit of 1500 (500 left)",
    });
    expect(await workflowExists(h, chargeWorkflowId(tenant, overKey))).toBe(false);
    expect(await countLedger(h.pool, tenant)).toEqual(afterInside);
    // The key was not used up: the same key with a charge that fits is a new request, not a 422.
    const fitsBody = chargeBody({ amount: 500 });
    const fits = await api.request('/v1/charges', { apiKey: key, body: fitsBody, headers: { 'idempotency-key': overKey } });
    expect(fits.status, JSON.stringify(fits.body)).toBe(201);
    expect(fits.body).toMatchObject({ status: 'succeeded' });
    // The limit is now used up: a repeat of an admitted charge still answers as it did (a replay,
    // not a refusal), and any new charge, however small, is refused.
    const repeated = await api.request('/v1/charges', { apiKey: key, body: fitsBody, headers: { 'idempotency-key': overKey } });
    expect(repeated.status, JSON.stringify(repeated.body)).toBe(200);
    expect(repeated.headers.get('idempotent-replayed')).toBe('true');
    expect(repeated.body).toMatchObject({ id: fits.body.id, status: 'succeeded' });
    const one = await api.request('/v1/charges', { apiKey: key, body: chargeBody({ amount: 1 }), headers: { 'idempotency-key': newKey() } });
    expect(one.status).toBe(403);
    expect(one.body).toMatchObject({ rule: 'daily_limit', detail: "amount 1 with the 1500 this key charged in the last 24 hours exceeds its daily limit of 1500 (0 left)" });
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 1_500);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('an expired key is refused on every route with 401, like a revoked one', async () => {
    const tenant = await fundedTenant(h, { label: 'mandate-expired' });
    const { key, id } = await agentKey(tenant, { expiresAt: new Date(Date.now() + 3_600_000).toISOString() });
    expect((await api.request('/v1/accounts/payer', { apiKey: key })).status).toBe(200);
    await h.pool.query("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [id]);
    const before = await countLedger(h.pool, tenant);
    for (const [path, body] of [
      ['/v1/accounts/payer', undefined],
      ['/v1/charges', chargeBody({ amount: 1 })],
      ['/v1/charges?order_id=x', undefined],
    ] as const) {
      const response = await api.request(path, { apiKey: key, ...(body ? { body, headers: { 'idempotency-key': newKey() } } : {}) });
      expect(response.status, path).toBe(401);
      expect(response.body, path).toMatchObject({ type: 'unauthorized', detail: 'the API key is unknown, revoked or expired' });
    }
    expect(await countLedger(h.pool, tenant)).toEqual(before);
  });

  it('50 concurrent charges of 1 against a daily limit of 10: exactly 10 succeed; the rest are refused 403 before anything starts, or, having raced past that check together, declined by the ledger', async () => {
    const tenant = await fundedTenant(h, { label: 'mandate-race' });
    const { key } = await agentKey(tenant, { dailyLimitMinor: 10 });
    const keys = Array.from({ length: 50 }, (_, i) => newKey(`race-${i}`));
    const answers = await Promise.all(
      keys.map((idempotencyKey) => api.request('/v1/charges', { apiKey: key, body: chargeBody({ amount: 1 }), headers: { 'idempotency-key': idempotencyKey } })),
    );
    const outcomes = answers.map((a) =>
      a.status === 403 ? `403:${a.body.rule}` : `${a.status}:${a.body.status}${a.body.decline_code ? `:${a.body.decline_code}` : ''}`,
    );
    expect(outcomes.filter((o) => o === '201:succeeded')).toHaveLength(10);
    const refused = outcomes.filter((o) => o === '403:daily_limit').length;
    const declined = outcomes.filter((o) => o === '201:declined:mandate_exceeded').length;
    expect(refused + declined, outcomes.join(' ')).toBe(40);
    // A refused request recorded nothing: its key has no row and no workflow.
    const refusedKeys = keys.filter((_, i) => answers[i]!.status === 403);
    const rows = await h.pool.query('SELECT 1 FROM charges WHERE tenant = $1 AND idempotency_key = ANY($2)', [tenant, refusedKeys]);
    expect(rows.rowCount).toBe(0);
    for (const idempotencyKey of refusedKeys.slice(0, 5)) expect(await workflowExists(h, chargeWorkflowId(tenant, idempotencyKey))).toBe(false);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 10);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it("two charges that each fit the daily limit but not together, admitted together: exactly one succeeds, the ledger's Try declines the other", async () => {
    const tenant = await fundedTenant(h, { label: 'mandate-pair' });
    const { key, id } = await agentKey(tenant, { dailyLimitMinor: 1_000 });
    const mandate = { ...noMandate, dailyLimitMinor: 1_000 };
    // Started on a queue no worker polls yet: both pass the service's check (nothing is held), both
    // start, and only then does a worker run their Trys, which the ledger serialises per key.
    const taskQueue = `mandate-pair-${newKey()}`;
    const service = h.clientFor({ taskQueue });
    const pair = [newKey('pair-a'), newKey('pair-b')];
    const handles = await Promise.all(pair.map((k) => service.startCharge(tenant, k, chargeBody({ amount: 600 }), { actor: { keyId: id, mandate } })));
    expect(handles.map((started) => started.replayed)).toEqual([false, false]);
    const worker = await startTestWorker({ taskQueue, pool: h.pool });
    try {
      const charges = await Promise.all(handles.map((started) => started.handle.result()));
      expect(charges.map((charge) => (charge.status === 'declined' ? `declined:${charge.declineCode}` : charge.status)).sort()).toEqual([
        'declined:mandate_exceeded',
        'succeeded',
      ]);
    } finally {
      await worker.stop();
    }
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 600);
    // 600 held or captured: 401 more does not fit, and is refused before anything starts.
    const next = await api.request('/v1/charges', { apiKey: key, body: chargeBody({ amount: 401 }), headers: { 'idempotency-key': newKey() } });
    expect(next.status).toBe(403);
    expect(next.body).toMatchObject({ rule: 'daily_limit' });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('MCP over HTTP: create_charge outside the mandate is a mandate_exceeded tool error, nothing recorded', async () => {
    const tenant = await fundedTenant(h, { label: 'mandate-mcp' });
    const { key } = await agentKey(tenant, { maxAmountMinor: 100, dailyLimitMinor: 150 });
    const before = await countLedger(h.pool, tenant);
    const { client, transport } = mcpOverHttp(api.baseUrl, key);
    await client.connect(transport);
    try {
      const result = await callTool(client, 'create_charge', { idempotency_key: newKey(), ...chargeBody({ amount: 101 }) });
      expect(result.isError).toBe(true);
      expect((result.structuredContent as any).error).toMatchObject({
        type: 'mandate_exceeded',
        rule: 'max_amount',
        detail: "amount 101 exceeds this key's largest charge of 100",
      });
      expect(await countLedger(h.pool, tenant)).toEqual(before);

      // The rolling total, judged by the same service call: 100 charged, 60 more does not fit.
      const inside = await callTool(client, 'create_charge', { idempotency_key: newKey(), ...chargeBody({ amount: 100 }) });
      expect((inside.structuredContent as any).charge).toMatchObject({ status: 'succeeded' });
      const afterInside = await countLedger(h.pool, tenant);
      const over = await callTool(client, 'create_charge', { idempotency_key: newKey(), ...chargeBody({ amount: 60 }) });
      expect(over.isError).toBe(true);
      expect((over.structuredContent as any).error).toMatchObject({ type: 'mandate_exceeded', rule: 'daily_limit' });
      expect(await countLedger(h.pool, tenant)).toEqual(afterInside);
    } finally {
      await client.close();
    }
  });

  it('MCP over stdio: the mandate holds, and a key that expires mid-session is refused on its next call', async () => {
    const stack = inject('stack');
    const tenant = await fundedTenant(h, { label: 'mandate-stdio' });
    const { key, id } = await agentKey(tenant, { currency: 'USD', expiresAt: new Date(Date.now() + 3_600_000).toISOString() });
    const stderr: string[] = [];
    const env: Record<string, string> = {
      ...(process.env as Record<string, string>),
      TEMPORAL_ADDRESS: stack.temporalAddress,
      DATABASE_URL: stack.databaseUrl,
      CHARGEGUARD_API_KEY: key,
      ...testPayloadSettings(),
    };
    delete env.CHARGEGUARD_TENANT;
    const transport = new StdioClientTransport({ command: process.execPath, args: ['--import', 'tsx', 'src/cli/main.ts', 'mcp', '--stdio'], env, stderr: 'pipe' });
    transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
    const client = new Client({ name: 'chargeguard-test', version: '1.0.0' });
    try {
      await client.connect(transport);
      const before = await countLedger(h.pool, tenant);
      const euro = await callTool(client, 'create_charge', { idempotency_key: newKey(), ...chargeBody({ amount: 100, currency: 'EUR' }) });
      expect((euro.structuredContent as any).error).toMatchObject({ type: 'mandate_exceeded', rule: 'currency' });
      expect(await countLedger(h.pool, tenant)).toEqual(before);

      await h.pool.query("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [id]);
      const read = await callTool(client, 'get_account_balance', { account_id: 'payer' });
      expect(read.isError).toBe(true);
      expect((read.structuredContent as any).error).toMatchObject({ type: 'unauthorized', detail: expect.stringMatching(/expired/) });
    } catch (error) {
      throw new Error(`${(error as Error).message}\n--- server stderr ---\n${stderr.join('')}`, { cause: error });
    } finally {
      await client.close();
    }
  });

  it('api-keys create takes the mandate flags; show and list print the mandate; bad values are refused', async () => {
    const tenant = await fundedTenant(h, { label: 'mandate-cli' });
    const created = await cli([
      'api-keys', 'create', '--tenant', tenant, '--max-amount', '1000', '--daily-limit', '5000',
      '--payees', 'payee,shop', '--currency', 'USD', '--expires-at', '2099-01-31T00:00:00Z', '--json',
    ]);
    expect(created.code, created.stderr).toBe(0);
    expect(created.json.mandate).toEqual({ max_amount: 1000, daily_limit: 5000, payees: ['payee', 'shop'], currency: 'USD', expires_at: '2099-01-31T00:00:00.000Z' });
    const shown = await cli(['api-keys', 'show', created.json.id]);
    expect(shown.stdout).toMatch(/mandate max amount 1000, daily limit 5000, payees payee,shop, currency USD, expires 2099-01-31T00:00:00.000Z/);
    const listed = await cli(['api-keys', 'list', '--tenant', tenant, '--json']);
    expect(listed.json.map((k: { mandate: unknown }) => k.mandate)).toEqual([created.json.mandate]);

    const refused = await cli(['api-keys', 'create', '--tenant', tenant, '--max-amount', '0', '--expires-at', '2001-01-01T00:00:00Z', '--json']);
    expect(refused.code).not.toBe(0);
    expect(refused.json.error.errors).toEqual([
      { field: '--max-amount', message: 'must be a whole number of minor units, at least 1' },
      { field: '--expires-at', message: 'must be in the future' },
    ]);
  });

  it('audit: refunds and deposits record the key that made them; the operator CLI records null', async () => {
    const tenant = await fundedTenant(h, { label: 'audit' });
    const { key, id } = await agentKey(tenant, {});
    const { key: admin, record } = await createApiKey(h.pool, tenant, 'audit admin', 'admin');
    const deposited = await api.request('/v1/accounts/payer/deposits', { apiKey: admin, body: { amount: 500 }, headers: { 'idempotency-key': newKey() } });
    expect(deposited.status, JSON.stringify(deposited.body)).toBe(201);
    const chargeKey = newKey('audited');
    expect((await api.request('/v1/charges', { apiKey: key, body: chargeBody({ amount: 300 }), headers: { 'idempotency-key': chargeKey } })).body.status).toBe('succeeded');
    const refundKey = newKey('refund');
    const refunded = await api.request(`/v1/charges/${chargeKey}/refunds`, { apiKey: key, body: { amount: 100 }, headers: { 'idempotency-key': refundKey } });
    expect(refunded.status, JSON.stringify(refunded.body)).toBe(201);
    expect(refunded.body).not.toHaveProperty('created_by_key_id');
    const refundPath = `/v1/charges/${chargeKey}/refunds/${refundKey}`;
    expect((await api.request(refundPath, { apiKey: admin })).body).toMatchObject({ status: 'succeeded', created_by_key_id: id });
    expect((await api.request(refundPath, { apiKey: key })).body).not.toHaveProperty('created_by_key_id');

    const deposits = await h.pool.query<{ created_by_key_id: string | null }>(
      "SELECT created_by_key_id FROM transfers WHERE tenant = $1 AND kind = 'deposit' ORDER BY id",
      [tenant],
    );
    // The harness funds the payer as the operator (null), then the admin key deposits.
    expect(deposits.rows.map((r) => r.created_by_key_id)).toEqual([null, record.id]);
    const refunds = await h.pool.query('SELECT created_by_key_id FROM refunds WHERE tenant = $1', [tenant]);
    expect(refunds.rows).toEqual([{ created_by_key_id: id }]);
    const charges = await h.pool.query('SELECT created_by_key_id FROM charges WHERE tenant = $1', [tenant]);
    expect(charges.rows).toEqual([{ created_by_key_id: id }]);
    await expectLedgerInvariants(h.pool, tenant);

    // reconcile counts them per key.
    const report = await reconcile({ ledger: h.pool, tenant });
    expect(report.counts.audit).toEqual({ byKey: { [id]: 2, [record.id]: 1 }, withoutKey: 1 });
    expect(formatReconcileReport(report)).toMatch(/\n {2}audit {6}3 charges, refunds and deposits by 2 API keys; 1 by the operator or from before audit\n/);
  });
});
