import { spawn, type ChildProcess } from 'node:child_process';
import { describe, expect, inject, it } from 'vitest';
import { createApiKey, type ApiKeyLimits } from '../src/auth/api-keys.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { readCharge } from '../src/ledger/charges.js';
import { findFreePort } from '../src/support/free-port.js';
import { chargeBody, fundedTenant, newKey, useHarness, waitFor, workflowExists } from './support/harness.js';
import { generousRateLimits, send, useApi, type TestResponse } from './support/api.js';
import { runCli as cli } from './support/cli.js';

const h = useHarness();
/** Generous request limits (each test gives its key its own), and a small tenant open holds limit. */
const tenantMaxOpenHolds = 5;
const api = useApi({ env: { ...generousRateLimits, OPEN_HOLDS_TENANT_MAX: String(tenantMaxOpenHolds) } });
/** A small tenant request limit, which two keys reach together. */
const tenantBurst = 8;
const tenantApi = useApi({
  env: { ...generousRateLimits, RATE_LIMIT_TENANT_PER_SECOND: '1', RATE_LIMIT_TENANT_BURST: String(tenantBurst) },
});

/** A fresh agent key with its own limits, as `api-keys create --rate-per-second --burst --max-open-holds` stores them. */
async function keyWith(tenant: string, limits: Partial<ApiKeyLimits>): Promise<{ key: string; id: string }> {
  const { key, record } = await createApiKey(h.pool, tenant, 'limited');
  await h.pool.query('UPDATE api_keys SET rate_limit_per_second = $2, rate_limit_burst = $3, max_open_holds = $4 WHERE id = $1', [
    record.id,
    limits.ratePerSecond ?? null,
    limits.burst ?? null,
    limits.maxOpenHolds ?? null,
  ]);
  return { key, id: record.id };
}

function charge(apiKey: string, idempotencyKey: string, overrides: Record<string, unknown> = {}): Promise<TestResponse> {
  return api.request('/v1/charges', { apiKey, body: chargeBody(overrides), headers: { 'idempotency-key': idempotencyKey } });
}

/** The Structured Fields items of a RateLimit or RateLimit-Policy field, by name. */
function fieldItems(value: string | null): Record<string, Record<string, number>> {
  const items: Record<string, Record<string, number>> = {};
  for (const item of (value ?? '').split(',').map((part) => part.trim()).filter(Boolean)) {
    const [name, ...params] = item.split(';');
    items[JSON.parse(name!) as string] = Object.fromEntries(params.map((p) => p.split('=')).map(([k, v]) => [k!, Number(v)]));
  }
  return items;
}

function expectRateLimited(response: TestResponse, scope: 'key' | 'tenant'): void {
  expect(response.status, response.text).toBe(429);
  expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(response.body).toMatchObject({ type: 'rate_limited', status: 429, scope, 'violated-policies': [scope] });
  expect(response.body.detail).toMatch(scope === 'key' ? /this API key's request limit/ : /this tenant's request limit/);
  const retryAfter = response.headers.get('retry-after');
  expect(retryAfter).toMatch(/^[0-9]+$/);
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1);
  expect(fieldItems(response.headers.get('ratelimit-policy'))[scope]).toBeDefined();
  expect(fieldItems(response.headers.get('ratelimit'))[scope]).toMatchObject({ r: 0 });
}

describe('request rate limits (token buckets in PostgreSQL)', () => {
  it('key limit: of burst + 1 rapid charges the extra one is a 429 with Retry-After and the RateLimit fields; it started nothing', async () => {
    const tenant = await fundedTenant(h, { label: 'rl-key' });
    const burst = 5;
    const { key } = await keyWith(tenant, { ratePerSecond: 1, burst });
    const keys = Array.from({ length: burst + 1 }, (_, i) => newKey(`rl-${i}`));
    const startedAt = Date.now();
    const answers = await Promise.all(keys.map((k) => charge(key, k, { amount: 10 })));
    const elapsedSeconds = (Date.now() - startedAt) / 1000;
    const accepted = answers.filter((a) => a.status === 201);
    const refused = answers.map((a, i) => ({ a, key: keys[i]! })).filter(({ a }) => a.status === 429);
    // The bucket refills at 1 token a second while the charges run: at most that many more pass.
    expect(accepted.length).toBeGreaterThanOrEqual(burst);
    expect(accepted.length).toBeLessThanOrEqual(burst + Math.floor(elapsedSeconds));
    expect(accepted.length + refused.length).toBe(keys.length);
    if (elapsedSeconds < 1) expect(refused).toHaveLength(1);
    for (const { a, key: refusedKey } of refused) {
      expectRateLimited(a, 'key');
      expect(fieldItems(a.headers.get('ratelimit-policy')).key).toEqual({ q: burst, w: burst });
      expect(await readCharge(h.pool, tenant, refusedKey)).toBeNull();
      expect(await workflowExists(h, chargeWorkflowId(tenant, refusedKey))).toBe(false);
    }
    // Accepted answers carry the fields too, so a client can slow down before it is refused.
    expect(fieldItems(accepted[0]!.headers.get('ratelimit')).key!.r).toBeLessThan(burst);
  });

  it('replays cost a token: a decided charge replayed until the key is out of tokens gets 429', async () => {
    const tenant = await fundedTenant(h, { label: 'rl-replay' });
    const { key } = await keyWith(tenant, { ratePerSecond: 1, burst: 3 });
    const chargeKey = newKey('replayed');
    const body = chargeBody({ amount: 10 });
    const send3 = () => api.request('/v1/charges', { apiKey: key, body, headers: { 'idempotency-key': chargeKey } });
    expect((await send3()).status).toBe(201);
    const replays: TestResponse[] = [];
    // Each replay is fast; three in a row outrun the 1/s refill well before the deadline.
    await waitFor(
      async () => {
        const replay = await send3();
        replays.push(replay);
        return replay.status === 429;
      },
      { timeoutMs: 10_000, intervalMs: 1, what: 'a replay refused' },
    );
    expect(replays.filter((r) => r.status === 200).every((r) => r.headers.get('idempotent-replayed') === 'true')).toBe(true);
    expect(replays.filter((r) => r.status === 200).length).toBeGreaterThanOrEqual(2);
    expectRateLimited(replays.at(-1)!, 'key');
  });

  it("tenant limit across two keys: together they get the tenant's burst, the rest are 429 naming the tenant", async () => {
    const tenant = await fundedTenant(h, { label: 'rl-tenant' });
    const first = await tenantApi.keyFor(tenant);
    const second = await tenantApi.keyFor(tenant);
    const startedAt = Date.now();
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => tenantApi.request('/v1/accounts/payer', { apiKey: i % 2 === 0 ? first : second })),
    );
    const elapsedSeconds = (Date.now() - startedAt) / 1000;
    const accepted = answers.filter((a) => a.status === 200).length;
    expect(accepted).toBeGreaterThanOrEqual(tenantBurst);
    expect(accepted).toBeLessThanOrEqual(tenantBurst + Math.floor(elapsedSeconds));
    const refused = answers.filter((a) => a.status !== 200);
    expect(refused.length).toBe(12 - accepted);
    for (const a of refused) expectRateLimited(a, 'tenant');
    expect(fieldItems(refused[0]!.headers.get('ratelimit-policy')).tenant).toEqual({ q: tenantBurst, w: tenantBurst });
  });

  it("requests without a valid key are refused (401) before the limiter: they spend no tenant's tokens", async () => {
    const tenant = await fundedTenant(h, { label: 'rl-anonymous' });
    const key = await tenantApi.keyFor(tenant);
    const anonymous = await Promise.all(
      Array.from({ length: 20 }, (_, i) => tenantApi.request('/v1/accounts/payer', { apiKey: i % 2 === 0 ? null : 'cgk_not-a-key' })),
    );
    expect(anonymous.every((a) => a.status === 401)).toBe(true);
    // Their RateLimit field is their source address's (test/api-stranger-limits.test.ts), no key's or tenant's.
    expect(anonymous.every((a) => Object.keys(fieldItems(a.headers.get('ratelimit'))).join() === 'address')).toBe(true);
    const first = await tenantApi.request('/v1/accounts/payer', { apiKey: key });
    expect(first.status).toBe(200);
    expect(fieldItems(first.headers.get('ratelimit')).tenant!.r).toBe(tenantBurst - 1);
  });
});

describe('open holds', () => {
  it('max-open-holds 3: three reserved manual captures, the 4th is 429 before anything starts; a replay is not refused; after a capture a new one is accepted', async () => {
    const tenant = await fundedTenant(h, { label: 'rl-holds' });
    const { key } = await keyWith(tenant, { maxOpenHolds: 3 });
    const held = [newKey('hold-1'), newKey('hold-2'), newKey('hold-3')];
    const bodies = held.map(() => chargeBody({ amount: 100, capture: 'manual' }));
    for (const [i, k] of held.entries()) {
      const reserved = await api.request('/v1/charges', { apiKey: key, body: bodies[i], headers: { 'idempotency-key': k } });
      expect(reserved.status, reserved.text).toBe(201);
      expect(reserved.body.status).toBe('reserved');
    }

    const fourthKey = newKey('hold-4');
    const fourth = await charge(key, fourthKey, { amount: 100, capture: 'manual' });
    expect(fourth.status, fourth.text).toBe(429);
    expect(fourth.body).toMatchObject({ type: 'open_holds_exceeded', scope: 'key' });
    expect(fourth.body.detail).toMatch(/this API key already has 3 charges holding money, its open holds limit is 3/);
    expect(Number(fourth.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(fourth.headers.get('ratelimit-policy')).toMatch(/"key";q=\d+;w=\d+/);
    expect(fourth.headers.get('ratelimit')).toMatch(/"key";r=\d+;t=\d+/);
    expect(await readCharge(h.pool, tenant, fourthKey)).toBeNull();
    expect(await workflowExists(h, chargeWorkflowId(tenant, fourthKey))).toBe(false);

    // A replay of a held charge holds nothing new: answered as before.
    const replay = await api.request('/v1/charges', { apiKey: key, body: bodies[0], headers: { 'idempotency-key': held[0]! } });
    expect(replay.status, replay.text).toBe(200);

    const captured = await api.request(`/v1/charges/${encodeURIComponent(held[0]!)}/capture`, { apiKey: key, body: {} });
    expect(captured.status, captured.text).toBe(200);
    const cancelled = await api.request(`/v1/charges/${encodeURIComponent(held[1]!)}/cancel`, { apiKey: key, body: {} });
    expect(cancelled.status, cancelled.text).toBe(200);
    const fifth = await charge(key, newKey('hold-5'), { amount: 100, capture: 'manual' });
    expect(fifth.status, fifth.text).toBe(201);
    expect(fifth.body.status).toBe('reserved');
  });

  it("tenant open holds: two keys together reach the tenant's limit; the next charge is 429 naming the tenant", async () => {
    const tenant = await fundedTenant(h, { label: 'rl-tenant-holds', payerMinor: 100_000 });
    const first = await api.keyFor(tenant);
    const second = await api.keyFor(tenant);
    for (let i = 0; i < tenantMaxOpenHolds; i++) {
      const reserved = await charge(i % 2 === 0 ? first : second, newKey(`th-${i}`), { amount: 100, capture: 'manual' });
      expect(reserved.status, reserved.text).toBe(201);
    }
    const over = await charge(second, newKey('th-over'), { amount: 100, capture: 'manual' });
    expect(over.status, over.text).toBe(429);
    expect(over.body).toMatchObject({ type: 'open_holds_exceeded', scope: 'tenant' });
    expect(over.body.detail).toMatch(new RegExp(`this tenant already has ${tenantMaxOpenHolds} charges holding money`));
  });
});

interface RunningApi {
  child: ChildProcess;
  baseUrl: string;
  output(): string;
}

/** `chargeguard api` in its own process, on the shared test stack, as a deployment runs a replica. */
async function startApiProcess(env: Record<string, string>): Promise<RunningApi> {
  const stack = inject('stack');
  const port = await findFreePort('127.0.0.1');
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'api', '--port', String(port), '--log-level', 'warn'], {
    env: { ...process.env, TEMPORAL_ADDRESS: stack.temporalAddress, DATABASE_URL: stack.databaseUrl, CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFile, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  child.stdout?.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (text += chunk.toString()));
  const baseUrl = `http://127.0.0.1:${port}`;
  await waitFor(
    async () => {
      if (child.exitCode !== null) throw new Error(`the API exited (${child.exitCode}):\n${text}`);
      return /API listening on/.test(text);
    },
    { timeoutMs: 120_000, intervalMs: 100, what: `the API on port ${port}` },
  );
  return { child, baseUrl, output: () => text };
}

async function stopApiProcess(running: RunningApi): Promise<void> {
  if (running.child.exitCode !== null) return;
  const exited = new Promise((resolve) => running.child.once('exit', resolve));
  running.child.kill('SIGTERM');
  await exited;
}

describe('limits hold across API processes', () => {
  it('two `chargeguard api` processes on one database share a key\'s bucket: accepted in all <= burst + rate x elapsed', { timeout: 300_000 }, async () => {
    const ratePerSecond = 2;
    const burst = 10;
    const env = { ...generousRateLimits, RATE_LIMIT_KEY_PER_SECOND: String(ratePerSecond), RATE_LIMIT_KEY_BURST: String(burst) };
    const [one, two] = await Promise.all([startApiProcess(env), startApiProcess(env)]);
    try {
      const tenant = await fundedTenant(h, { label: 'rl-replicas' });
      const key = await api.keyFor(tenant);
      const startedAt = Date.now();
      // One after the other, alternating: sent all at once, whichever process answered first could
      // take the whole burst, and "each process served some" would depend on start-up timing. With
      // two separate buckets, 20 or more of the 30 would be accepted.
      const answers: Awaited<ReturnType<typeof send>>[] = [];
      for (let i = 0; i < 30; i++) answers.push(await send(i % 2 === 0 ? one.baseUrl : two.baseUrl, '/v1/accounts/payer', { apiKey: key }));
      const elapsedSeconds = (Date.now() - startedAt) / 1000;
      const acceptedBy = [0, 1].map((side) => answers.filter((a, i) => i % 2 === side && a.status === 200).length);
      const accepted = acceptedBy[0]! + acceptedBy[1]!;
      console.log(`two API processes: accepted ${acceptedBy.join(' + ')} = ${accepted} of 30 in ${elapsedSeconds.toFixed(2)} s (bound ${burst} + ${ratePerSecond} x elapsed)`);
      expect(accepted).toBeGreaterThanOrEqual(burst);
      expect(accepted).toBeLessThanOrEqual(burst + Math.floor(ratePerSecond * elapsedSeconds));
      for (const a of answers.filter((x) => x.status !== 200)) expectRateLimited(a, 'key');
      // Each process served some and refused some: one bucket, not one per process.
      expect(acceptedBy.every((n) => n > 0)).toBe(true);
      expect(answers.filter((a, i) => i % 2 === 0 && a.status === 429).length + answers.filter((a, i) => i % 2 === 1 && a.status === 429).length).toBe(30 - accepted);
    } finally {
      await Promise.all([stopApiProcess(one), stopApiProcess(two)]);
    }
  });
});

describe('the limiter on every request', () => {
  it('every request through the hook takes a token and says what the hook took (Server-Timing ratelimit)', async () => {
    const tenant = await fundedTenant(h, { label: 'rl-cost' });
    // A burst no test reaches, refilled slowly: the bucket's count shows every request took a token.
    const burst = 1_000_000;
    const { key } = await keyWith(tenant, { ratePerSecond: 1, burst });
    // What the hook costs is a benchmark's question (npm run bench:front-door measures the
    // limiter's statement beside a bare round trip); here, that each request passed through it.
    const requestCount = 50;
    const startedAt = Date.now();
    for (let i = 0; i < requestCount; i++) {
      // GET of an unknown charge: the cheapest route, so the request is mostly the hooks.
      const answer = await api.request(`/v1/charges/${newKey('absent')}`, { apiKey: key });
      expect(answer.status).toBe(404);
      expect(answer.headers.get('server-timing') ?? '').toMatch(/ratelimit;dur=[0-9.]+/);
    }
    const elapsedSeconds = (Date.now() - startedAt) / 1000;
    const remaining = fieldItems((await api.request('/v1/accounts/payer', { apiKey: key })).headers.get('ratelimit')).key!.r;
    expect(remaining).toBeLessThanOrEqual(burst - (requestCount + 1) + Math.ceil(elapsedSeconds));
  });
});

describe('api-keys create --rate-per-second --burst --max-open-holds', () => {
  it('stores the key\'s own limits, list and show print them, bad values are refused naming the flag', async () => {
    const tenant = await fundedTenant(h, { label: 'rl-cli' });
    const created = await cli(['api-keys', 'create', '--tenant', tenant, '--rate-per-second', '2', '--burst', '4', '--max-open-holds', '3', '--json']);
    expect(created.code, created.stderr).toBe(0);
    expect(created.json.limits).toEqual({ rate_per_second: 2, burst: 4, max_open_holds: 3 });
    const shown = await cli(['api-keys', 'show', created.json.id]);
    expect(shown.stdout).toMatch(/limits 2 req\/s, burst 4, open holds 3/);
    const listed = await cli(['api-keys', 'list', '--tenant', tenant, '--json']);
    expect(listed.json[0].limits).toEqual({ rate_per_second: 2, burst: 4, max_open_holds: 3 });
    const plain = await cli(['api-keys', 'create', '--tenant', tenant, '--json']);
    expect(plain.json.limits).toEqual({ rate_per_second: null, burst: null, max_open_holds: null });

    // The key's own burst applies on the next request, in any API process.
    const response = await api.request('/v1/accounts/payer', { apiKey: created.json.key });
    expect(fieldItems(response.headers.get('ratelimit-policy')).key).toEqual({ q: 4, w: 2 });

    const refused = await cli(['api-keys', 'create', '--tenant', tenant, '--burst', '0', '--rate-per-second', '1.5', '--max-open-holds', 'x', '--json']);
    expect(refused.code).toBe(2);
    expect(refused.json.error.errors.map((e: { field: string }) => e.field).sort()).toEqual(['--burst', '--max-open-holds', '--rate-per-second']);
  });
});
