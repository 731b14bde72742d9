import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { buildApi } from '../src/api/app.js';
import { healthLimiterBudgetMs } from '../src/http/rate-limit-hook.js';
import { isLoopback, limitSubjectOf } from '../src/http/source-address.js';
import { apiKeyPrefix } from '../src/auth/api-keys.js';
import { webhookSignatureHeaderValue } from '../src/domain/webhook-signature.js';
import { deleteFullAddressBuckets, takeChainedTokens } from '../src/ledger/rate-limits.js';
import { addWebhookSecret } from '../src/service/webhooks.js';
import { openTestApi, send, useApi, type TestApi } from './support/api.js';
import { balanceOf, fundedTenant, newKey, useHarness } from './support/harness.js';

const h = useHarness();

/** Small buckets refilled at 1 a second, so a test reaches each limit in a few requests. */
const burst = 5;
const providerBurst = 8;
const metricsToken = randomBytes(32).toString('base64url');
const limitedEnv = {
  RATE_LIMIT_STRANGER_PER_SECOND: '1',
  RATE_LIMIT_STRANGER_BURST: String(burst),
  RATE_LIMIT_WEBHOOK_ADDRESS_PER_SECOND: '1',
  RATE_LIMIT_WEBHOOK_ADDRESS_BURST: String(burst),
  RATE_LIMIT_WEBHOOK_PROVIDER_PER_SECOND: '1',
  RATE_LIMIT_WEBHOOK_PROVIDER_BURST: String(providerBurst),
  RATE_LIMIT_HEALTH_PER_SECOND: '1',
  RATE_LIMIT_HEALTH_BURST: String(burst),
  CHARGEGUARD_METRICS_TOKEN: metricsToken,
};
const api = useApi({ mcp: false, env: limitedEnv });

afterEach(() => {
  vi.restoreAllMocks();
});

/**
 * A source address of the test's own (a /64 of the IPv6 documentation prefix), given to fastify's
 * inject as the connection's peer: no two tests share a bucket, and none shares 127.0.0.1's with the
 * other test files.
 */
function newAddress(): string {
  return `2001:db8:${randomBytes(2).toString('hex')}:${randomBytes(2).toString('hex')}::7`;
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | number | undefined>;
  body: any;
  ms: number;
}

async function from(
  address: string,
  request: { method?: 'GET' | 'POST'; url: string; headers?: Record<string, string>; payload?: string },
  target: TestApi = api,
): Promise<Answer> {
  const startedAt = performance.now();
  const response = await target.app.inject({ method: request.method ?? 'GET', url: request.url, headers: request.headers, payload: request.payload, remoteAddress: address });
  let body: unknown;
  try {
    body = JSON.parse(response.body);
  } catch {
    body = response.body;
  }
  return { status: response.statusCode, headers: response.headers, body, ms: performance.now() - startedAt };
}

/** `count` requests one after another; the bucket refills at 1 a second meanwhile, so the elapsed time bounds what may pass. */
async function flood(count: number, sendOne: (i: number) => Promise<Answer>): Promise<{ answers: Answer[]; elapsedSeconds: number }> {
  const startedAt = Date.now();
  const answers: Answer[] = [];
  for (let i = 0; i < count; i++) answers.push(await sendOne(i));
  return { answers, elapsedSeconds: (Date.now() - startedAt) / 1000 };
}

/** Of a flood against a bucket of `limit`: the first `limit` pass, then at most one more per second elapsed. */
function expectLimited(answers: Answer[], elapsedSeconds: number, limit: number): { passed: Answer[]; refused: Answer[] } {
  const passed = answers.filter((a) => a.status !== 429);
  const refused = answers.filter((a) => a.status === 429);
  for (const answer of answers.slice(0, limit)) expect(answer.status).not.toBe(429);
  expect(passed.length).toBeLessThanOrEqual(limit + Math.ceil(elapsedSeconds));
  expect(refused.length).toBeGreaterThanOrEqual(answers.length - limit - Math.ceil(elapsedSeconds));
  expect(refused.length).toBeGreaterThan(0);
  return { passed, refused };
}

function fieldItems(value: unknown): Record<string, Record<string, number>> {
  const items: Record<string, Record<string, number>> = {};
  for (const item of String(value ?? '').split(',').map((part) => part.trim()).filter(Boolean)) {
    const [name, ...params] = item.split(';');
    items[JSON.parse(name!) as string] = Object.fromEntries(params.map((p) => p.split('=')).map(([k, v]) => [k!, Number(v)]));
  }
  return items;
}

function expectRefused(answer: Answer, scope: 'address' | 'provider', limitName: RegExp): void {
  expect(answer.status, JSON.stringify(answer.body)).toBe(429);
  expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/);
  expect(answer.body).toMatchObject({ type: 'rate_limited', status: 429, scope, 'violated-policies': [scope] });
  expect(answer.body.detail).toMatch(limitName);
  expect(String(answer.headers['retry-after'])).toMatch(/^[1-9][0-9]*$/);
  expect(fieldItems(answer.headers['ratelimit-policy'])[scope]).toBeDefined();
  expect(fieldItems(answer.headers.ratelimit)[scope]).toMatchObject({ r: 0 });
}

/** Counts the ledger queries of one kind the API makes from now on. */
function countQueries(target: TestApi, marker: string): () => number {
  const query = vi.spyOn(target.context.ledger, 'query');
  return () => query.mock.calls.filter(([text]) => String(typeof text === 'string' ? text : (text as { text?: string }).text).includes(marker)).length;
}

/** The API key lookup (src/ledger/api-keys.ts) and the read of a provider's secrets before any HMAC (src/ledger/webhooks.ts). */
const keyLookup = 'WHERE key_hash = $1';
const secretsRead = 'SELECT id, secret FROM webhook_secrets';

const madeUpKey = () => apiKeyPrefix + randomBytes(32).toString('base64url');

describe('callers without a valid API key: limited per source address before any key is looked up', () => {
  it('no key: 401 up to the burst, then 429 with Retry-After and the RateLimit fields of the address', async () => {
    const address = newAddress();
    const { answers, elapsedSeconds } = await flood(burst + 10, () => from(address, { url: '/v1/accounts/payer' }));
    const { passed, refused } = expectLimited(answers, elapsedSeconds, burst);
    for (const answer of passed) {
      expect(answer.status).toBe(401);
      expect(fieldItems(answer.headers['ratelimit-policy']).address).toEqual({ q: burst, w: burst });
    }
    for (const answer of refused) expectRefused(answer, 'address', /this source address's limit on requests without a valid API key/);
  });

  it('made-up keys: past the burst no key is looked up (the ledger sees one lookup per 401, none per 429)', async () => {
    const address = newAddress();
    const lookups = countQueries(api, keyLookup);
    const { answers, elapsedSeconds } = await flood(burst + 20, () =>
      from(address, { url: '/v1/charges/some-key', headers: { authorization: `Bearer ${madeUpKey()}` } }),
    );
    const { passed, refused } = expectLimited(answers, elapsedSeconds, burst);
    expect(passed.every((a) => a.status === 401)).toBe(true);
    expect(lookups()).toBe(passed.length);
    for (const answer of refused) expectRefused(answer, 'address', /without a valid API key/);
    const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    console.log(
      `stranger flood of ${answers.length}: ${passed.length} answered 401 (key looked up; median ${median(passed.map((a) => a.ms)).toFixed(2)} ms), ` +
        `${refused.length} answered 429 (no lookup; median ${median(refused.map((a) => a.ms)).toFixed(2)} ms), ${lookups()} key lookups`,
    );
  });

  it("a flooded address: other addresses, and keys proven through this process, are served; an unproven key waits for the address's bucket", async () => {
    const tenant = await fundedTenant(h, { label: 'stranger' });
    const proven = await api.keyFor(tenant);
    const unproven = await api.keyFor(tenant);
    const flooded = newAddress();
    const elsewhere = newAddress();

    // The proven key authenticates once (from anywhere); from then on it skips the address limit.
    expect((await from(elsewhere, { url: '/v1/accounts/payer', headers: { authorization: `Bearer ${proven}` } })).status).toBe(200);
    const { answers, elapsedSeconds } = await flood(burst + 10, () => from(flooded, { url: '/v1/accounts/payer' }));
    expectLimited(answers, elapsedSeconds, burst);

    const provenAnswer = await from(flooded, { url: '/v1/accounts/payer', headers: { authorization: `Bearer ${proven}` } });
    expect(provenAnswer.status).toBe(200);
    // An authenticated answer carries its key's and tenant's fields, not the address's.
    expect(Object.keys(fieldItems(provenAnswer.headers['ratelimit-policy']))).toEqual(['key', 'tenant']);

    expect((await from(elsewhere, { url: '/v1/accounts/payer' })).status).toBe(401);
    expectRefused(await from(flooded, { url: '/v1/accounts/payer', headers: { authorization: `Bearer ${unproven}` } }), 'address', /without a valid API key/);
    expect((await from(elsewhere, { url: '/v1/accounts/payer', headers: { authorization: `Bearer ${unproven}` } })).status).toBe(200);
    expect((await from(flooded, { url: '/v1/accounts/payer', headers: { authorization: `Bearer ${unproven}` } })).status).toBe(200);
  });

  it('the limit holds across API processes: an address refused by one is refused by another on the same database', async () => {
    const other = await openTestApi({ mcp: false, env: limitedEnv });
    try {
      const address = newAddress();
      const { answers, elapsedSeconds } = await flood(burst + 5, () => from(address, { url: '/v1/accounts/payer' }));
      expectLimited(answers, elapsedSeconds, burst);
      expectRefused(await from(address, { url: '/v1/accounts/payer' }, other), 'address', /without a valid API key/);
    } finally {
      await other.close();
    }
  });

  it('the source address is the peer: IPv4 alone, IPv6 by its /64, loopback recognised in every form', () => {
    expect(limitSubjectOf('203.0.113.9')).toBe('203.0.113.9');
    expect(limitSubjectOf('::ffff:203.0.113.9')).toBe('203.0.113.9');
    expect(limitSubjectOf('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(limitSubjectOf('2001:DB8:1:2:bbbb:cccc:dddd:eeee')).toBe('2001:db8:1:2::/64');
    expect(limitSubjectOf('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(limitSubjectOf('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(limitSubjectOf('64:ff9b::192.0.2.1')).toBe('64:ff9b:0:0::/64');
    expect(limitSubjectOf(undefined)).toBe('unknown');
    for (const ip of ['127.0.0.1', '127.9.9.9', '::1', '::ffff:127.0.0.1', '0:0:0:0:0:0:0:1']) expect(isLoopback(ip), ip).toBe(true);
    for (const ip of ['203.0.113.9', '10.0.0.1', '::ffff:10.0.0.1', '2001:db8::1', '::', '::2', '128.0.0.1', undefined]) expect(isLoopback(ip), String(ip)).toBe(false);
  });
});

describe('webhooks: limited per source address and per provider before any signature is computed', () => {
  const nowSeconds = () => Math.floor(Date.now() / 1000);

  function deliver(address: string, provider: string, body: unknown, secrets: string[]): Promise<Answer> {
    const payload = JSON.stringify(body);
    const signature = webhookSignatureHeaderValue(secrets, nowSeconds(), payload);
    return from(address, {
      method: 'POST',
      url: `/v1/webhooks/${provider}`,
      headers: { 'content-type': 'application/json', 'chargeguard-signature': signature },
      payload,
    });
  }

  const forged = () => `whsec_${randomBytes(32).toString('base64url')}`;

  const deposit = (tenant: string) => ({
    id: newKey('evt'),
    type: 'deposit.succeeded',
    data: { tenant, account_id: 'payer', amount_minor: 100, currency: 'USD' },
  });

  it('bad signatures: 401 up to the burst, then 429; a refused delivery never reads the secrets an HMAC needs', async () => {
    const provider = `stranger-bad-${randomBytes(4).toString('hex')}`;
    await addWebhookSecret(h.pool, provider);
    const address = newAddress();
    const reads = countQueries(api, secretsRead);
    const { answers, elapsedSeconds } = await flood(burst + 10, () => deliver(address, provider, deposit('nobody'), [forged()]));
    const { passed, refused } = expectLimited(answers, elapsedSeconds, burst);
    expect(passed.every((a) => a.status === 401)).toBe(true);
    expect(reads()).toBe(passed.length);
    for (const answer of refused) expectRefused(answer, 'address', /this source address's limit on webhooks/);
  });

  it('good signatures: credited up to the burst, then 429, with nothing verified or credited for the refused ones', async () => {
    const provider = `stranger-good-${randomBytes(4).toString('hex')}`;
    const { secret } = await addWebhookSecret(h.pool, provider);
    const tenant = await fundedTenant(h, { label: 'stranger-hook', payerMinor: 0 });
    const address = newAddress();
    const reads = countQueries(api, secretsRead);
    const { answers, elapsedSeconds } = await flood(burst + 10, () => deliver(address, provider, deposit(tenant), [secret]));
    const { passed, refused } = expectLimited(answers, elapsedSeconds, burst);
    expect(passed.every((a) => a.status === 200 && a.body.status === 'credited')).toBe(true);
    expect(reads()).toBe(passed.length);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100 * passed.length);
    for (const answer of refused) expectRefused(answer, 'address', /limit on webhooks/);
  });

  it("a provider's bucket bounds every address together; another provider is not affected", async () => {
    const provider = `stranger-prov-${randomBytes(4).toString('hex')}`;
    const first = newAddress();
    const second = newAddress();
    const startedAt = Date.now();
    const fromFirst = await flood(burst, () => deliver(first, provider, deposit('nobody'), [forged()]));
    const fromSecond = await flood(burst, () => deliver(second, provider, deposit('nobody'), [forged()]));
    const elapsedSeconds = (Date.now() - startedAt) / 1000;
    const all = [...fromFirst.answers, ...fromSecond.answers];
    // Each address stays within its own burst: only the provider's bucket (8) can refuse these ten.
    const { refused } = expectLimited(all, elapsedSeconds, providerBurst);
    for (const answer of refused) {
      expectRefused(answer, 'provider', /this provider's limit on webhooks/);
      expect(Object.keys(fieldItems(answer.headers['ratelimit-policy']))).toEqual(['address', 'provider']);
    }
    const otherProvider = await deliver(newAddress(), `stranger-other-${randomBytes(4).toString('hex')}`, deposit('nobody'), [forged()]);
    expect(otherProvider.status).toBe(401);
  });
});

describe('health checks: metered per source address, served when the limiter cannot answer', () => {
  it('/healthz and /readyz share a bucket per address; another address is not affected', async () => {
    const address = newAddress();
    const { answers, elapsedSeconds } = await flood(burst + 6, (i) => from(address, { url: i % 2 === 0 ? '/healthz' : '/readyz' }));
    const { passed, refused } = expectLimited(answers, elapsedSeconds, burst);
    expect(passed.every((a) => a.status === 200)).toBe(true);
    for (const answer of refused) expectRefused(answer, 'address', /this source address's limit on health checks/);
    expect((await from(newAddress(), { url: '/healthz' })).status).toBe(200);
  });

  it('a limiter that fails or hangs does not fail the probe', async () => {
    const query = vi.spyOn(api.context.ledger, 'query');
    query.mockRejectedValueOnce(new Error('connection refused'));
    expect((await from(newAddress(), { url: '/healthz' })).status).toBe(200);
    query.mockReturnValueOnce(new Promise(() => {}) as never);
    const hung = await from(newAddress(), { url: '/healthz' });
    expect(hung.status).toBe(200);
    expect(hung.ms).toBeGreaterThanOrEqual(healthLimiterBudgetMs - 5);
  });
});

describe('/metrics: loopback, or the operator token', () => {
  it('refuses another address with 401 unless it presents the token, which is compared exactly', async () => {
    const outsider = '203.0.113.50';
    const bare = await from(outsider, { url: '/metrics' });
    expect(bare.status).toBe(401);
    expect(bare.headers['www-authenticate']).toMatch(/^Bearer /);
    expect(bare.body.detail).toMatch(/CHARGEGUARD_METRICS_TOKEN/);
    for (const wrong of [`${metricsToken}x`, metricsToken.slice(1), madeUpKey()]) {
      expect((await from(outsider, { url: '/metrics', headers: { authorization: `Bearer ${wrong}` } })).status).toBe(401);
    }
    const served = await from(outsider, { url: '/metrics', headers: { authorization: `Bearer ${metricsToken}` } });
    expect(served.status).toBe(200);
    expect(String(served.body)).toMatch(/chargeguard_http_request_duration_seconds/);
  });

  it('serves loopback clients without a token, over a real socket too', async () => {
    for (const address of ['127.0.0.1', '::1', '::ffff:127.0.0.1']) expect((await from(address, { url: '/metrics' })).status, address).toBe(200);
    const overHttp = await send(api.baseUrl, '/metrics');
    expect(overHttp.status).toBe(200);
    expect(overHttp.text).toMatch(/chargeguard_charges_started_total/);
  });

  it('without a token configured, another address gets 404, as for a path that does not exist', async () => {
    const { CHARGEGUARD_METRICS_TOKEN: _token, ...config } = api.context.config;
    const app = await buildApi({ context: { ...api.context, config } });
    try {
      const answer = await app.inject({ url: '/metrics', remoteAddress: '203.0.113.51', headers: { authorization: `Bearer ${metricsToken}` } });
      expect(answer.statusCode).toBe(404);
      expect(JSON.parse(answer.body)).toMatchObject({ type: 'not_found', detail: 'no route GET /metrics' });
      expect((await app.inject({ url: '/metrics', remoteAddress: '127.0.0.1' })).statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });
});

describe('idle address buckets', () => {
  it('are deleted once refilled; a bucket still refilling and key or tenant buckets stay', async () => {
    const refilled = `sweep-${randomBytes(4).toString('hex')}`;
    const refilling = `sweep-${randomBytes(4).toString('hex')}`;
    // 1,000 tokens a second into a bucket of 1: full again a millisecond after its take.
    await takeChainedTokens(h.pool, 1, { scope: 'stranger', subject: refilled, ratePerSecond: 1_000, burst: 1 });
    await takeChainedTokens(h.pool, 1, { scope: 'health', subject: refilling, ratePerSecond: 1, burst: 1_000 }, null);
    const rows = async () =>
      (await h.pool.query<{ subject: string }>('SELECT subject FROM rate_limit_buckets WHERE subject = ANY ($1)', [[refilled, refilling]])).rows.map((r) => r.subject);
    expect((await rows()).sort()).toEqual([refilled, refilling].sort());
    const keysBefore = (await h.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM rate_limit_buckets WHERE scope IN ('key', 'tenant')")).rows[0]!.n;
    const deadline = Date.now() + 10_000;
    while ((await rows()).includes(refilled) && Date.now() < deadline) await deleteFullAddressBuckets(h.pool);
    expect(await rows()).toEqual([refilling]);
    const keysAfter = (await h.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM rate_limit_buckets WHERE scope IN ('key', 'tenant')")).rows[0]!.n;
    expect(keysAfter).toBeGreaterThanOrEqual(keysBefore);
  });
});
