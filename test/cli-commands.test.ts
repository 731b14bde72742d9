import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { verifiedKeyTtlMsDefault } from '../src/auth/verified-keys.js';
import { balanceOf, captureCount, expectLedgerInvariants, fundedTenant, newKey, newTenant, useHarness, waitFor } from './support/harness.js';
import { useApi } from './support/api.js';
import { runCli as cli } from './support/cli.js';
import { createApiKey } from '../src/auth/api-keys.js';
import { readCharge } from '../src/ledger/charges.js';
import { listRefunds } from '../src/ledger/refunds.js';
import { countLedger } from '../src/ledger/reports.js';

const h = useHarness();
const api = useApi();

describe('the CLI', () => {
  // Each command is a real process start (a few seconds on a busy two-core machine).
  it('api-keys, accounts, deposits and charges from the command line, with --json and exit codes', { timeout: 300_000 }, async () => {
    const tenant = newTenant('cli');
    const unauthenticated = await api.request('/v1/accounts/payer', { apiKey: 'cgk_wrong' });
    expect(unauthenticated.status).toBe(401);

    expect((await cli(['accounts', 'create', '--tenant', tenant, '--id', 'payer', '--currency', 'USD'])).code).toBe(0);
    expect((await cli(['accounts', 'create', '--tenant', tenant, '--id', 'payee', '--currency', 'USD'])).code).toBe(0);
    const deposit = await cli(['accounts', 'deposit', 'payer', '--tenant', tenant, '--amount', '5000', '--reference', 'cli-funding', '--json']);
    expect(deposit.json).toMatchObject({ replayed: false, deposit: { amount: 5_000, account_id: 'payer' } });
    const redeposit = await cli(['accounts', 'deposit', 'payer', '--tenant', tenant, '--amount', '5000', '--reference', 'cli-funding', '--json']);
    expect(redeposit.json.replayed).toBe(true);

    const chargeKey = newKey('cli');
    const chargeArgs = ['charge', '--tenant', tenant, '--key', chargeKey, '--order', 'o-cli', '--payer', 'payer', '--payee', 'payee', '--amount', '1200', '--currency', 'USD'];
    const first = await cli([...chargeArgs, '--json']);
    expect(first.code, first.stderr).toBe(0);
    expect(first.json).toMatchObject({ replayed: false, completed: true, charge: { status: 'succeeded', amount: 1_200 } });
    const again = await cli(chargeArgs);
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/succeeded.*replayed: nothing new was charged/s);

    const status = await cli(['status', chargeKey, '--tenant', tenant, '--json']);
    expect(status.json).toEqual(first.json.charge);
    const cancel = await cli(['cancel', chargeKey, '--tenant', tenant, '--json']);
    expect(cancel.code).toBe(4);
    expect(cancel.json.error).toMatchObject({ type: 'charge_state_conflict', reason: 'ChargeAlreadySucceeded' });
    const invalid = await cli(['charge', ...chargeArgs.slice(1, 3), '--key', newKey(), ...chargeArgs.slice(5, 11), '--amount', '0', '--currency', 'USD', '--json']);
    expect(invalid.code).toBe(2);
    expect(invalid.json.error.errors).toContainEqual({ field: 'amount', message: 'must be at least 1' });
    const missing = await cli(['status', newKey('nobody'), '--tenant', tenant]);
    expect(missing.code).toBe(3);
    expect(missing.stderr).toMatch(/no charge/);

    expect(await captureCount(h.pool, tenant, chargeKey)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(5_000 - 1_200);

    const key = await cli(['api-keys', 'create', '--tenant', tenant, '--label', 'cli test', '--json']);
    expect(key.code, key.stderr).toBe(0);
    expect(key.json).toMatchObject({ tenant, label: 'cli test' });
    expect(key.json.key).toMatch(/^cgk_/);
    // The key the CLI printed works against the HTTP API, for this tenant's account.
    const viaApi = await api.request('/v1/accounts/payer', { apiKey: key.json.key });
    expect(viaApi.status).toBe(200);
    expect(viaApi.body.posted).toBe(5_000 - 1_200);
    // Once the tenant has a key, the ledger moves its money only for one of its keys: without one the
    // CLI refuses before starting anything (docs/back-door.md, "Who acts without a key").
    const keylessKey = newKey();
    const keyless = await cli(['charge', ...chargeArgs.slice(1, 3), '--key', keylessKey, ...chargeArgs.slice(5), '--json']);
    expect(keyless.code).toBe(77);
    expect(keyless.json.error).toMatchObject({ type: 'unauthorized', detail: expect.stringMatching(/CHARGEGUARD_API_KEY/) });
    expect(await readCharge(h.pool, tenant, keylessKey)).toBeNull();
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(5_000 - 1_200);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('says what is missing when the servers are not named, and revokes keys', { timeout: 180_000 }, async () => {
    const noServers = await cli(['status', 'k', '--tenant', 'x'], { TEMPORAL_ADDRESS: undefined });
    expect(noServers.code).toBe(2);
    expect(noServers.stderr).toMatch(/TEMPORAL_ADDRESS is not set/);

    const tenant = newTenant('cli-revoke');
    const created = await cli(['api-keys', 'create', '--tenant', tenant, '--json']);
    expect(created.json).toMatchObject({ role: 'agent', last_used_at: null, revoked_at: null });
    expect((await api.request('/v1/accounts/none', { apiKey: created.json.key })).status).toBe(404);
    const shown = await cli(['api-keys', 'show', created.json.id]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(new RegExp(`^${created.json.id}  tenant ${tenant}  role agent  .*created \\S+  last used 20\\S+\\n$`));
    const revoked = await cli(['api-keys', 'revoke', created.json.id, '--json']);
    expect(revoked.code).toBe(0);
    expect(revoked.json.revoked_at).not.toBeNull();
    expect(revoked.json.last_used_at).not.toBeNull();
    // An API process keeps believing a key it verified for up to API_KEY_CACHE_TTL_MS after a
    // revocation (src/auth/verified-keys.ts): the revoked key is refused once that has passed.
    await waitFor(async () => (await api.request('/v1/accounts/none', { apiKey: created.json.key })).status === 401, {
      timeoutMs: verifiedKeyTtlMsDefault + 5_000,
      intervalMs: 100,
      what: 'the revoked key to be refused (401) within the verified-key cache time',
    });
    const listed = await cli(['api-keys', 'list', '--tenant', tenant, '--json']);
    expect(listed.json).toHaveLength(1);
    expect(JSON.stringify(listed.json)).not.toContain(created.json.key);
    expect(listed.json[0]).toMatchObject({ id: created.json.id, role: 'agent', revoked_at: revoked.json.revoked_at });
  });

  it('api-keys create --role admin makes a key that may open accounts; an unknown role is refused', { timeout: 120_000 }, async () => {
    const tenant = newTenant('cli-admin');
    const badRole = await cli(['api-keys', 'create', '--tenant', tenant, '--role', 'root', '--json']);
    expect(badRole.code).toBe(2);
    expect(badRole.json.error.errors).toEqual([{ field: '--role', message: 'must be one of agent, admin' }]);
    const admin = await cli(['api-keys', 'create', '--tenant', tenant, '--role', 'admin', '--json']);
    expect(admin.code, admin.stderr).toBe(0);
    expect(admin.json).toMatchObject({ tenant, role: 'admin' });
    const opened = await api.request('/v1/accounts', { apiKey: admin.json.key, body: { id: 'payer', currency: 'USD' }, headers: { 'idempotency-key': newKey() } });
    expect(opened.status, JSON.stringify(opened.body)).toBe(201);
    const listed = await cli(['api-keys', 'list', '--tenant', tenant]);
    expect(listed.stdout).toMatch(/role admin .*last used 20/);
  });

  it('acts as an API key (CHARGEGUARD_API_KEY or --api-key-file): the charge and refund record the key and obey its mandate; without a key a keyed tenant is refused naming the setting', { timeout: 300_000 }, async () => {
    const tenant = await fundedTenant(h, { label: 'cli-key' });
    const { key, record } = await createApiKey(h.pool, tenant, 'cli agent');
    const { key: capped } = await createApiKey(h.pool, tenant, 'capped', 'agent', { maxAmountMinor: 500, dailyLimitMinor: null, allowedPayeeAccountIds: null, currency: null, expiresAt: null });
    const dir = mkdtempSync(join(tmpdir(), 'cli-key-'));
    try {
      const keyFile = join(dir, 'api-key');
      writeFileSync(keyFile, `${key}\n`, { mode: 0o600 });
      const chargeKey = newKey('cli-keyed');
      const chargeArgs = ['charge', '--key', chargeKey, '--order', 'o-key', '--payer', 'payer', '--payee', 'payee', '--amount', '1200', '--currency', 'USD', '--json'];

      // No key: refused before anything starts, the message naming the setting; nothing recorded.
      const before = await countLedger(h.pool, tenant);
      const keyless = await cli([...chargeArgs, '--tenant', tenant]);
      expect(keyless.code).toBe(77);
      expect(keyless.json.error).toMatchObject({ type: 'unauthorized', detail: expect.stringMatching(/CHARGEGUARD_API_KEY/) });
      const keylessHuman = await cli(['charge', ...chargeArgs.slice(1, -1), '--tenant', tenant]);
      expect(keylessHuman.code).toBe(77);
      expect(keylessHuman.stderr).toMatch(/has API keys.*CHARGEGUARD_API_KEY/);
      expect(await countLedger(h.pool, tenant)).toEqual(before);

      // With the key in the environment (no --tenant needed): charged, recorded as the key's.
      const charged = await cli(chargeArgs, { CHARGEGUARD_API_KEY: key, CHARGEGUARD_TENANT: undefined });
      expect(charged.code, charged.stderr).toBe(0);
      expect(charged.json).toMatchObject({ completed: true, charge: { status: 'succeeded', amount: 1_200 } });
      expect((await readCharge(h.pool, tenant, chargeKey))!.charge.createdByKeyId).toBe(record.id);
      // The key is never printed.
      expect(charged.stdout + charged.stderr).not.toContain(key);

      // Refund: without a key refused naming the setting; with --api-key-file, recorded as the key's.
      const refundKey = newKey('cli-refund');
      const keylessRefund = await cli(['refund', chargeKey, '--tenant', tenant, '--refund-key', refundKey, '--amount', '200', '--json']);
      expect(keylessRefund.code).toBe(77);
      expect(keylessRefund.json.error.detail).toMatch(/CHARGEGUARD_API_KEY/);
      const refunded = await cli(['refund', chargeKey, '--api-key-file', keyFile, '--refund-key', refundKey, '--amount', '200', '--json'], { CHARGEGUARD_TENANT: undefined });
      expect(refunded.code, refunded.stderr).toBe(0);
      expect(refunded.json.refund).toMatchObject({ status: 'succeeded', amount: 200 });
      expect((await listRefunds(h.pool, tenant, chargeKey)).map((refund) => refund.createdByKeyId)).toEqual([record.id]);

      // The key's mandate, as over HTTP: a charge above its largest is refused, nothing started.
      const overMandateKey = newKey('cli-capped');
      const overMandate = await cli(['charge', '--key', overMandateKey, ...chargeArgs.slice(3)], { CHARGEGUARD_API_KEY: capped });
      expect(overMandate.code).toBe(77);
      expect(overMandate.json.error).toMatchObject({ type: 'mandate_exceeded', rule: 'max_amount' });
      expect(await readCharge(h.pool, tenant, overMandateKey)).toBeNull();

      // A key of this tenant with --tenant naming another: refused, naming the flag.
      const mismatch = await cli([...chargeArgs, '--tenant', newTenant('other')], { CHARGEGUARD_API_KEY: key });
      expect(mismatch.code).toBe(2);
      expect(mismatch.json.error.errors[0]).toMatchObject({ field: '--tenant' });
      const unknown = await cli(['cancel', chargeKey, '--json'], { CHARGEGUARD_API_KEY: 'cgk_unknown' });
      expect(unknown.code).toBe(77);
      expect(unknown.json.error.type).toBe('unauthorized');
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
