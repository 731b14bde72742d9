import { describe, expect, it } from 'vitest';
import { listApiKeys, revokeApiKey } from '../src/auth/api-keys.js';
import { VerifiedKeys } from '../src/auth/verified-keys.js';
import type { ApiKeyPrincipal } from '../src/ledger/api-keys.js';
import { noMandate } from '../src/domain/mandate.js';
import { fundedApiTenant, useApi } from './support/api.js';
import { useHarness } from './support/harness.js';

const h = useHarness();

function principal(expiresAt: string | null = null): ApiKeyPrincipal {
  return { keyId: 'key_1', tenant: 't', role: 'agent', mandate: { ...noMandate, expiresAt }, signingSecret: null };
}

/** A cache on a clock the test moves, and a lookup that counts its calls and answers what it is told. */
function cacheOn(ttlMs: number, maxKeys = 10) {
  let nowMs = 1_000_000;
  const verified = new VerifiedKeys({ ttlMs, maxKeys, now: () => nowMs });
  let lookups = 0;
  let answer: () => Promise<ApiKeyPrincipal | null> = async () => principal();
  const lookUp = () => {
    lookups += 1;
    return answer();
  };
  return {
    verified,
    lookUp,
    lookups: () => lookups,
    answer: (next: () => Promise<ApiKeyPrincipal | null>) => (answer = next),
    advance: (ms: number) => (nowMs += ms),
    nowMs: () => nowMs,
  };
}

describe('verified API keys: a key is looked up again once its entry is older than the TTL', () => {
  it('within the TTL the cached principal answers; at the TTL the key is looked up again, and a revocation is seen then', async () => {
    const c = cacheOn(1_000);
    expect(await c.verified.principalFor('h', c.lookUp)).toEqual(principal());
    c.advance(999);
    expect(await c.verified.principalFor('h', c.lookUp)).toEqual(principal());
    expect(c.lookups()).toBe(1);
    c.answer(async () => null); // revoked in the database
    c.advance(1);
    expect(await c.verified.principalFor('h', c.lookUp)).toBeNull();
    expect(await c.verified.principalFor('h', c.lookUp)).toBeNull();
    expect(c.lookups()).toBe(3); // an unknown or revoked key is never cached
  });

  it('a key whose own expiry comes before the TTL is not believed past it', async () => {
    const c = cacheOn(60_000);
    c.answer(async () => principal(new Date(c.nowMs() + 500).toISOString()));
    expect(await c.verified.principalFor('h', c.lookUp)).not.toBeNull();
    c.advance(499);
    await c.verified.principalFor('h', c.lookUp);
    expect(c.lookups()).toBe(1);
    c.answer(async () => null);
    c.advance(1);
    expect(await c.verified.principalFor('h', c.lookUp)).toBeNull();
    expect(c.lookups()).toBe(2);
  });

  it('a failed lookup is not cached; overlapping lookups of one key share one round trip', async () => {
    const c = cacheOn(1_000);
    c.answer(async () => Promise.reject(new Error('database down')));
    await expect(c.verified.principalFor('h', c.lookUp)).rejects.toThrow('database down');
    c.answer(async () => principal());
    expect(await c.verified.principalFor('h', c.lookUp)).toEqual(principal());
    expect(c.lookups()).toBe(2);
    let resolve!: (p: ApiKeyPrincipal) => void;
    c.answer(() => new Promise((r) => (resolve = r)));
    c.advance(1_000);
    const both = Promise.all([c.verified.principalFor('h', c.lookUp), c.verified.principalFor('h', c.lookUp)]);
    resolve(principal());
    expect(await both).toEqual([principal(), principal()]);
    expect(c.lookups()).toBe(3);
  });

  it('holds at most maxKeys, the least recently verified leaving first; TTL 0 looks every request up', async () => {
    const c = cacheOn(1_000, 2);
    for (const key of ['a', 'b', 'c']) await c.verified.principalFor(key, c.lookUp);
    await c.verified.principalFor('c', c.lookUp);
    await c.verified.principalFor('b', c.lookUp);
    expect(c.lookups()).toBe(3);
    await c.verified.principalFor('a', c.lookUp);
    expect(c.lookups()).toBe(4);

    const off = cacheOn(0);
    for (let i = 0; i < 3; i += 1) await off.verified.principalFor('h', off.lookUp);
    expect(off.lookups()).toBe(3);
  });
});

describe('the API believes a verified key for API_KEY_CACHE_TTL_MS', () => {
  const cached = useApi({ env: { API_KEY_CACHE_TTL_MS: '60000' } });
  const uncached = useApi({ env: { API_KEY_CACHE_TTL_MS: '0' } });

  it('a key revoked after its use is still accepted by a process that verified it within the TTL; with 0 it is refused at once', async () => {
    for (const [api, answerAfterRevoke] of [
      [cached, 200],
      [uncached, 401],
    ] as const) {
      const { tenant, apiKey } = await fundedApiTenant(api, { label: 'key-cache' });
      expect((await api.request('/v1/accounts/payer', { apiKey })).status).toBe(200);
      const [record] = await listApiKeys(h.pool, tenant);
      await revokeApiKey(h.pool, record!.id);
      expect((await api.request('/v1/accounts/payer', { apiKey })).status).toBe(answerAfterRevoke);
    }
  });
});
