import { describe, expect, it } from 'vitest';
import { createApiKey } from '../src/auth/api-keys.js';
import type { ChargeIntent } from '../src/domain/charge.js';
import { noMandate, type Mandate } from '../src/domain/mandate.js';
import { revokeApiKey } from '../src/ledger/api-keys.js';
import { tryHold } from '../src/ledger/charges.js';
import { tryProviderHold } from '../src/ledger/provider-charges.js';
import { providerNames } from '../src/domain/providers.js';
import { fundedTenant, ledgerIntent, newKey, providerIntent, useHarness } from './support/harness.js';

/**
 * ledger_provider_try restates ledger_try's key and mandate rules (ledger_try inlines them for
 * speed): the same refusals through both, decided from the ledger's own rows, so the two copies
 * cannot drift apart unnoticed. Nothing reaches a provider here: these are Try's decisions alone.
 */
const h = useHarness();

async function keyOf(tenant: string, mandate: Partial<Mandate> = {}): Promise<string> {
  return (await createApiKey(h.pool, tenant, 'agent key', 'agent', { ...noMandate, ...mandate })).record.id;
}

type Case = {
  what: string;
  decline: string | null;
  arrange(tenant: string): Promise<{ keyId?: string; amountMinor?: number; payee?: string }>;
};

const cases: Case[] = [
  { what: 'an agent key within its mandate', decline: null, arrange: async (t) => ({ keyId: await keyOf(t, { maxAmountMinor: 5_000 }) }) },
  { what: 'above the largest charge', decline: 'mandate_exceeded', arrange: async (t) => ({ keyId: await keyOf(t, { maxAmountMinor: 500 }) }) },
  { what: 'another currency than the key’s', decline: 'mandate_exceeded', arrange: async (t) => ({ keyId: await keyOf(t, { currency: 'EUR' }) }) },
  { what: 'a payee the key may not pay', decline: 'mandate_exceeded', arrange: async (t) => ({ keyId: await keyOf(t, { allowedPayeeAccountIds: ['someone-else'] }) }) },
  { what: 'above the daily limit', decline: 'mandate_exceeded', arrange: async (t) => ({ keyId: await keyOf(t, { dailyLimitMinor: 999 }) }) },
  {
    what: 'a revoked key',
    decline: 'key_not_authorized',
    arrange: async (t) => {
      const keyId = await keyOf(t);
      await revokeApiKey(h.pool, keyId);
      return { keyId };
    },
  },
  { what: 'no key in a tenant that has keys', decline: 'key_not_authorized', arrange: async (t) => (await keyOf(t), {}) },
  { what: 'above the ledger maximum', decline: 'amount_too_large', arrange: async () => ({ amountMinor: 2_000_000_000_000 }) },
  { what: 'a system account as payee', decline: 'unknown_account', arrange: async () => ({ payee: '@external/USD' }) },
];

describe('Try and the provider Try decide alike', () => {
  for (const c of cases) {
    it(`${c.what}: ${c.decline ?? 'reserved'} by both`, async () => {
      const decisions: (string | null)[] = [];
      for (const which of ['ledger', 'provider'] as const) {
        const tenant = await fundedTenant(h, { label: `ptry-${which}` });
        const { keyId, amountMinor = 1_000, payee = 'payee' } = await c.arrange(tenant);
        const key = newKey();
        const intent: ChargeIntent =
          which === 'ledger'
            ? { ...ledgerIntent(tenant, key, 'payer', payee, amountMinor), ...(keyId ? { actingKeyId: keyId } : {}) }
            : providerIntent(tenant, key, 'pm_card_visa', { amountMinor, payee, ...(keyId ? { actingKeyId: keyId } : {}) });
        const row = which === 'ledger' ? await tryHold(h.pool, intent, 60_000) : await tryProviderHold(h.pool, intent, 60_000);
        decisions.push(row.holdState === 'DECLINED' ? row.charge.declineCode : null);
        expect(row.holdState, which).toBe(c.decline === null ? 'TRIED' : 'DECLINED');
      }
      expect(decisions).toEqual([c.decline, c.decline]);
    });
  }
});

describe('the provider Try knows its providers', () => {
  it('refuses a provider name the program does not know (class 23): no charge row, no clearing account, nothing held', async () => {
    // Measured: a forged workflow start naming provider "evil" made @provider/evil/USD and held money on it.
    const tenant = await fundedTenant(h, { label: 'lps-evil' });
    const genuine = providerIntent(tenant, newKey('evil'), 'pm_card_visa');
    const intent = {
      ...genuine,
      request: { ...genuine.request, payerAccountId: '@provider/evil/USD', paymentMethod: { provider: 'evil', id: 'pm_card_visa' } },
    } as unknown as ChargeIntent;
    const refused = await tryProviderHold(h.pool, intent, 60_000).then(
      () => null,
      (error: unknown) => error as { fault?: string; sqlState?: string; message?: string },
    );
    // A rejected value (class 23): retrying cannot cure it, so a Try gives up at once.
    expect(refused).toMatchObject({ fault: 'dataRejected', sqlState: '23514' });
    expect(refused?.message).toMatch(/provider evil is not one this ledger knows/);
    const rows = await h.pool.query('SELECT 1 FROM charges WHERE tenant = $1', [tenant]);
    expect(rows.rowCount).toBe(0);
    const clearing = await h.pool.query("SELECT id FROM accounts WHERE tenant = $1 AND id LIKE '@provider/%'", [tenant]);
    expect(clearing.rows).toEqual([]);

    // Every provider the program knows is still taken.
    for (const provider of providerNames) {
      const known = providerIntent(tenant, newKey(provider), 'pm_card_visa');
      expect((await tryProviderHold(h.pool, known, 60_000)).holdState).toBe('TRIED');
    }
  });

  it("the ledger's list is the program's: the trigger names exactly src/domain/providers.ts's providerNames", async () => {
    const { rows } = await h.pool.query<{ def: string }>(
      "SELECT pg_get_triggerdef(oid) AS def FROM pg_trigger WHERE tgname = 'charges_provider_known'",
    );
    const named = [...(rows[0]?.def ?? '').matchAll(/'([a-z0-9_]+)'::text/g)].map((m) => m[1]).sort();
    expect(named).toEqual([...providerNames].sort());
  });
});
