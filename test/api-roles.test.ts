import { describe, expect, it } from 'vitest';
import { createApiKey, getApiKey } from '../src/auth/api-keys.js';
import { permissions, permissionFor, roles } from '../src/domain/permissions.js';
import { countLedger } from '../src/ledger/reports.js';
import { balanceOf, chargeBody, expectLedgerInvariants, fundedTenant, newKey, useHarness } from './support/harness.js';
import { useApi } from './support/api.js';

const h = useHarness();
// Keys looked up on every request (API_KEY_CACHE_TTL_MS 0): the last-use test ages a key's recorded
// use in the database and expects the very next request to look the key up and write it again.
const api = useApi({ env: { API_KEY_CACHE_TTL_MS: '0' } });

const openAccountRefusal = /^opening accounts needs an admin key; this key is an agent key$/;
const depositRefusal = /^depositing money needs an admin key; this key is an agent key$/;

describe('roles: only admin keys create money', () => {
  it('the permission table: agents move existing money, admins also open accounts, deposit, manage keys and webhook endpoints, and read system accounts', () => {
    const adminOnly = Object.entries(permissions)
      .filter(([, permission]) => !permission.roles.includes('agent'))
      .map(([operation]) => operation)
      .sort();
    expect(adminOnly).toEqual(['accounts.deposit', 'accounts.open', 'api_keys.manage', 'system_accounts.read', 'webhook_endpoints.manage']);
    for (const operation of Object.keys(permissions) as Array<keyof typeof permissions>) {
      expect(permissionFor('admin', operation), operation).toEqual({ allowed: true });
    }
    expect(roles).toEqual(['agent', 'admin']);
  });

  it('an agent key gets 403 forbidden naming the rule on every admin route, before anything is read or recorded', async () => {
    const tenant = await fundedTenant(h, { label: 'roles-agent' });
    const agentKey = await api.keyFor(tenant);
    const before = await countLedger(h.pool, tenant);

    const attempts: Array<{ label: string; path: string; body: unknown; headers: Record<string, string>; detail: RegExp; operation: string }> = [
      { label: 'open', path: '/v1/accounts', body: { id: 'mine', currency: 'USD' }, headers: { 'idempotency-key': newKey() }, detail: openAccountRefusal, operation: 'accounts.open' },
      {
        label: 'open with overdraft',
        path: '/v1/accounts',
        body: { id: 'bottomless', currency: 'USD', allow_overdraft: true },
        headers: { 'idempotency-key': newKey() },
        detail: openAccountRefusal,
        operation: 'accounts.open',
      },
      // Refused for the role before the body is judged: a bad body changes nothing.
      { label: 'open, bad body', path: '/v1/accounts', body: { currency: 'nope' }, headers: {}, detail: openAccountRefusal, operation: 'accounts.open' },
      { label: 'deposit by key', path: '/v1/accounts/payer/deposits', body: { amount: 1_000_000 }, headers: { 'idempotency-key': newKey() }, detail: depositRefusal, operation: 'accounts.deposit' },
      { label: 'deposit by external_id', path: '/v1/accounts/payer/deposits', body: { amount: 5, external_id: newKey('evt') }, headers: {}, detail: depositRefusal, operation: 'accounts.deposit' },
      { label: 'deposit to an unknown account', path: '/v1/accounts/nobody/deposits', body: { amount: 5 }, headers: { 'idempotency-key': newKey() }, detail: depositRefusal, operation: 'accounts.deposit' },
    ];
    for (const attempt of attempts) {
      const response = await api.request(attempt.path, { apiKey: agentKey, body: attempt.body, headers: attempt.headers });
      expect(response.status, attempt.label).toBe(403);
      expect(response.headers.get('content-type'), attempt.label).toMatch(/^application\/problem\+json/);
      expect(response.body, attempt.label).toMatchObject({ type: 'forbidden', title: 'Forbidden', status: 403, operation: attempt.operation });
      expect(response.body.detail, attempt.label).toMatch(attempt.detail);
    }

    expect(await countLedger(h.pool, tenant)).toEqual(before);
    const accounts = await h.pool.query('SELECT id FROM accounts WHERE tenant = $1 AND NOT is_system ORDER BY id', [tenant]);
    expect(accounts.rows.map((r) => r.id)).toEqual(['payee', 'payer']);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000);

    // The same key does everything an agent does: charge, read the charge and the balance.
    const key = newKey('agent-charge');
    const charged = await api.request('/v1/charges', { apiKey: agentKey, body: chargeBody({ amount: 700 }), headers: { 'idempotency-key': key } });
    expect(charged.status, JSON.stringify(charged.body)).toBe(201);
    expect((await api.request(`/v1/charges/${key}`, { apiKey: agentKey })).body.status).toBe('succeeded');
    expect((await api.request('/v1/accounts/payer', { apiKey: agentKey })).body).toMatchObject({ posted: 10_000 - 700 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('an admin key opens accounts (overdraft too), deposits, and charges', async () => {
    const tenant = await fundedTenant(h, { label: 'roles-admin' });
    const adminKey = await api.keyFor(tenant, 'admin');
    const opened = await api.request('/v1/accounts', {
      apiKey: adminKey,
      body: { id: 'float', currency: 'USD', allow_overdraft: true },
      headers: { 'idempotency-key': newKey() },
    });
    expect(opened.status, JSON.stringify(opened.body)).toBe(201);
    expect(opened.body).toMatchObject({ id: 'float', allow_overdraft: true });
    const deposited = await api.request('/v1/accounts/payer/deposits', { apiKey: adminKey, body: { amount: 2_500 }, headers: { 'idempotency-key': newKey() } });
    expect(deposited.status, JSON.stringify(deposited.body)).toBe(201);
    const charged = await api.request('/v1/charges', { apiKey: adminKey, body: chargeBody({ amount: 100 }), headers: { 'idempotency-key': newKey() } });
    expect(charged.status).toBe(201);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 + 2_500 - 100);
    await expectLedgerInvariants(h.pool, tenant);
  });
});

describe('deposits: Idempotency-Key and external_id', () => {
  it('both given must agree: a mismatch is a 400 naming both fields and deposits nothing; agreeing ids deposit once', async () => {
    const tenant = await fundedTenant(h, { label: 'dep-both' });
    const adminKey = await api.keyFor(tenant, 'admin');
    const before = await countLedger(h.pool, tenant);

    const mismatch = await api.request('/v1/accounts/payer/deposits', {
      apiKey: adminKey,
      body: { amount: 300, external_id: 'psp_evt_a' },
      headers: { 'idempotency-key': 'psp_evt_b' },
    });
    expect(mismatch.status).toBe(400);
    expect(mismatch.body.type).toBe('validation_error');
    expect(mismatch.body.errors.map((e: { field: string }) => e.field).sort()).toEqual(['Idempotency-Key', 'external_id']);
    expect(mismatch.body.detail).toMatch(/must be equal/);
    expect(await countLedger(h.pool, tenant)).toEqual(before);

    const agreeing = await api.request('/v1/accounts/payer/deposits', {
      apiKey: adminKey,
      body: { amount: 300, external_id: 'psp_evt_c' },
      headers: { 'idempotency-key': 'psp_evt_c' },
    });
    expect(agreeing.status, JSON.stringify(agreeing.body)).toBe(201);
    // The same event redelivered without the header is the same deposit.
    const redelivered = await api.request('/v1/accounts/payer/deposits', { apiKey: adminKey, body: { amount: 300, external_id: 'psp_evt_c' } });
    expect(redelivered.status).toBe(200);
    expect(redelivered.body).toEqual(agreeing.body);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 + 300);
    await expectLedgerInvariants(h.pool, tenant);
  });
});

describe('API keys record their last use', () => {
  it('set on authentication, written at most once a minute per key', async () => {
    const tenant = await fundedTenant(h, { label: 'last-used' });
    const { key, record } = await createApiKey(h.pool, tenant, 'last-used');
    expect(record).toMatchObject({ role: 'agent', lastUsedAt: null, revokedAt: null });

    const startedAt = Date.now();
    expect((await api.request('/v1/accounts/payer', { apiKey: key })).status).toBe(200);
    const first = (await getApiKey(h.pool, record.id))!.lastUsedAt;
    expect(first).not.toBeNull();
    // The database's clock, which may differ from this process's by a little.
    expect(Math.abs(Date.parse(first!) - startedAt)).toBeLessThan(60_000);

    // Used again within the minute: no new write.
    expect((await api.request('/v1/accounts/payer', { apiKey: key })).status).toBe(200);
    expect((await getApiKey(h.pool, record.id))!.lastUsedAt).toBe(first);

    // Once the recorded use is more than a minute old, the next use writes again.
    await h.pool.query("UPDATE api_keys SET last_used_at = last_used_at - interval '2 minutes' WHERE id = $1", [record.id]);
    const aged = (await getApiKey(h.pool, record.id))!.lastUsedAt!;
    expect((await api.request('/v1/accounts/payer', { apiKey: key })).status).toBe(200);
    const refreshed = (await getApiKey(h.pool, record.id))!.lastUsedAt!;
    expect(Date.parse(refreshed)).toBeGreaterThan(Date.parse(aged));
  });
});
