import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ChargeDeclinedError,
  ChargeguardClient,
  IdempotencyConflictError,
  NoAnswerError,
  NotFoundProblemError,
  ProblemError,
  ValidationProblemError,
  type ClientLimits,
} from '../src/client/http/index.js';
import { fundedApiTenant, useApi } from './support/api.js';
import { newKey } from './support/harness.js';

const api = useApi();

/** What the proxy does with one request: pass it, or forward it and lose the answer, or answer for the API. */
type Fault = 'pass' | 'drop-answer' | 'hold-answer' | 'answer-503';

interface Seen {
  method: string;
  path: string;
  key: string | undefined;
  /** What the API answered (null: never forwarded). */
  upstreamStatus: number | null;
  fault: Fault;
  /** When the request reached the proxy, and when the API's answer did (ms since the epoch). */
  at: number;
  answeredAt: number | null;
}

/**
 * A real HTTP proxy in front of the API, for faults between client and server: `drop-answer`
 * forwards the request, lets the API run it, then cuts the client's connection before any byte of
 * the answer (a connection lost mid-request); `hold-answer` forwards it and never answers, until the
 * client gives up (its timeout); `answer-503` answers 503 itself, as a gateway does while the API is down.
 */
async function faultyProxy(upstream: string, faultFor: (request: IncomingMessage, index: number) => Fault): Promise<{ url: string; seen: Seen[]; close(): Promise<void> }> {
  const seen: Seen[] = [];
  const server: Server = createServer((request: IncomingMessage, response: ServerResponse) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const fault = faultFor(request, seen.length);
      const entry: Seen = { method: request.method!, path: request.url!, key: request.headers['idempotency-key'] as string | undefined, upstreamStatus: null, fault, at: Date.now(), answeredAt: null };
      seen.push(entry);
      if (fault === 'answer-503') {
        response.writeHead(503, { 'content-type': 'application/problem+json', 'retry-after': '0' });
        response.end(JSON.stringify({ type: 'service_unavailable', title: 'Service unavailable', status: 503, detail: 'the proxy says so' }));
        return;
      }
      const headers = Object.fromEntries(
        Object.entries(request.headers).filter(([name]) => !['host', 'connection', 'content-length', 'keep-alive'].includes(name)),
      ) as Record<string, string>;
      const body = chunks.length > 0 ? Buffer.concat(chunks) : undefined;
      const answer = await fetch(`${upstream}${request.url}`, { method: request.method, headers, body });
      const text = await answer.text();
      entry.upstreamStatus = answer.status;
      entry.answeredAt = Date.now();
      if (fault === 'drop-answer') {
        request.socket.destroy();
        return;
      }
      if (fault === 'hold-answer') return; // the client's timeout closes the connection
      const forwarded: Record<string, string> = {};
      answer.headers.forEach((value, name) => {
        if (!['content-length', 'transfer-encoding', 'connection', 'keep-alive', 'content-encoding'].includes(name)) forwarded[name] = value;
      });
      response.writeHead(answer.status, forwarded);
      response.end(text);
    })().catch((error: unknown) => {
      response.destroy(error as Error);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

/** Short waits, so a test's retries take milliseconds: the bounds are the client's, only smaller. */
const quick: Partial<ClientLimits> = { retryBackoffInitialMs: 20, retryBackoffMaxMs: 100 };

const isCreate = (request: IncomingMessage) => request.method === 'POST' && request.url === '/v1/charges';

let tenantKey: string;
let proxies: Array<{ close(): Promise<void> }> = [];
beforeAll(async () => {
  tenantKey = (await fundedApiTenant(api, { label: 'client', payerMinor: 1_000_000 })).apiKey;
});
afterAll(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close()));
  proxies = [];
});

async function through(faultFor: (request: IncomingMessage, index: number) => Fault) {
  const proxy = await faultyProxy(api.baseUrl, faultFor);
  proxies.push(proxy);
  return proxy;
}

/** The charges of an order, read past the client, from the API itself. */
async function chargesOfOrder(apiKey: string, orderId: string): Promise<any[]> {
  const page = await api.request(`/v1/charges?order_id=${encodeURIComponent(orderId)}&limit=100`, { apiKey });
  expect(page.status).toBe(200);
  return page.body.data;
}

async function payerPosted(apiKey: string): Promise<number> {
  return (await api.request('/v1/accounts/payer', { apiKey })).body.posted;
}

const body = (orderId: string, amount = 1_500) => ({ order_id: orderId, payer_account_id: 'payer', payee_account_id: 'payee', amount, currency: 'USD' as const });

/**
 * Checked by `tsc` (never run): the generated request type takes exactly one payer, and leaves
 * `capture` (which has a default) optional. A regression here fails the typecheck.
 */
export function createChargeTypeChecks(client: ChargeguardClient): Array<Promise<unknown>> {
  const base = { order_id: 'o', payee_account_id: 'payee', amount: 1, currency: 'USD' as const };
  return [
    client.createCharge({ ...base, payer_account_id: 'payer' }),
    client.createCharge({ ...base, payment_method: 'pm_card_visa', provider: 'stripe' }),
    // @ts-expect-error both payers
    client.createCharge({ ...base, payer_account_id: 'payer', payment_method: 'pm_card_visa' }),
    // @ts-expect-error neither payer
    client.createCharge({ ...base }),
    // @ts-expect-error provider belongs to payment_method
    client.createCharge({ ...base, payer_account_id: 'payer', provider: 'stripe' }),
  ];
}

describe('the typed HTTP client', () => {
  it('repeats a create whose connection was lost after the API ran it, with the same key: one charge, charged once', async () => {
    const { apiKey } = await fundedApiTenant(api, { label: 'client-drop', payerMinor: 10_000 });
    const proxy = await through((request) => (isCreate(request) && proxy.seen.filter((s) => s.method === 'POST').length === 0 ? 'drop-answer' : 'pass'));
    const client = new ChargeguardClient({ baseUrl: proxy.url, apiKey, limits: quick });
    const key = newKey('client-drop');
    const charge = await client.createCharge(body('drop-1'), { idempotencyKey: key });
    expect(charge).toMatchObject({ status: 'succeeded', idempotency_key: key, amount: 1_500 });
    const creates = proxy.seen.filter((s) => s.method === 'POST');
    // The first attempt ran (201) but its answer was lost; the repeat, same key, got the replay.
    expect(creates.map((s) => [s.key, s.upstreamStatus, s.fault])).toEqual([
      [key, 201, 'drop-answer'],
      [key, 200, 'pass'],
    ]);
    expect(await chargesOfOrder(apiKey, 'drop-1')).toHaveLength(1);
    expect(await payerPosted(apiKey)).toBe(10_000 - 1_500);
  });

  it('repeats a create that got no answer within requestTimeoutMs (AbortSignal), with the same key: charged once', async () => {
    const { apiKey } = await fundedApiTenant(api, { label: 'client-timeout', payerMinor: 10_000 });
    const proxy = await through((request) => (isCreate(request) && proxy.seen.filter((s) => s.method === 'POST').length === 0 ? 'hold-answer' : 'pass'));
    const client = new ChargeguardClient({ baseUrl: proxy.url, apiKey, limits: { ...quick, requestTimeoutMs: 1_500 } });
    const charge = await client.createCharge(body('timeout-1'));
    expect(charge.status).toBe('succeeded');
    const creates = proxy.seen.filter((s) => s.method === 'POST');
    expect(creates.map((s) => s.fault)).toEqual(['hold-answer', 'pass']);
    // A key of the client's own making, the same on both attempts.
    expect(creates[0]!.key).toMatch(/^cg-/);
    expect(creates[1]!.key).toBe(creates[0]!.key);
    expect(creates[1]!.upstreamStatus).toBe(200);
    expect(await chargesOfOrder(apiKey, 'timeout-1')).toHaveLength(1);
    expect(await payerPosted(apiKey)).toBe(10_000 - 1_500);
  });

  it('waits out a 503 (Retry-After) and repeats with the same key', async () => {
    const proxy = await through((request, index) => (isCreate(request) && index < 2 ? 'answer-503' : 'pass'));
    const client = new ChargeguardClient({ baseUrl: proxy.url, apiKey: tenantKey, limits: quick });
    const key = newKey('client-503');
    const charge = await client.createCharge(body('unavailable-1'), { idempotencyKey: key });
    expect(charge.status).toBe('succeeded');
    expect(proxy.seen.map((s) => [s.key, s.fault, s.upstreamStatus])).toEqual([
      [key, 'answer-503', null],
      [key, 'answer-503', null],
      [key, 'pass', 201],
    ]);
  });

  it('gives up after createAttemptsMax attempts with NoAnswerError naming the key; the same key later charges once', async () => {
    const { apiKey } = await fundedApiTenant(api, { label: 'client-give-up', payerMinor: 10_000 });
    const proxy = await through((request) => (isCreate(request) ? 'drop-answer' : 'pass'));
    const client = new ChargeguardClient({ baseUrl: proxy.url, apiKey, limits: { ...quick, createAttemptsMax: 3 } });
    const key = newKey('client-give-up');
    const failure = await client.createCharge(body('give-up-1'), { idempotencyKey: key }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(NoAnswerError);
    expect(failure).toMatchObject({ idempotencyKey: key, attempts: 3 });
    expect(proxy.seen.map((s) => s.upstreamStatus)).toEqual([201, 200, 200]);
    const direct = new ChargeguardClient({ baseUrl: api.baseUrl, apiKey });
    expect((await direct.createCharge(body('give-up-1'), { idempotencyKey: key })).status).toBe('succeeded');
    expect(await chargesOfOrder(apiKey, 'give-up-1')).toHaveLength(1);
    expect(await payerPosted(apiKey)).toBe(10_000 - 1_500);
  });

  it('polls a 202 at Location, honouring Retry-After, until the charge is decided', async () => {
    const proxy = await through(() => 'pass');
    const client = new ChargeguardClient({ baseUrl: proxy.url, apiKey: tenantKey, limits: quick });
    const key = newKey('client-202');
    const charge = await client.createCharge(body('accepted-1'), { idempotencyKey: key, waitSeconds: 0 });
    expect(charge).toMatchObject({ status: 'succeeded', idempotency_key: key });
    expect(proxy.seen[0]).toMatchObject({ method: 'POST', upstreamStatus: 202 });
    const polls = proxy.seen.slice(1);
    expect(polls.length).toBeGreaterThanOrEqual(1);
    for (const poll of polls) expect(poll).toMatchObject({ method: 'GET', path: `/v1/charges/${encodeURIComponent(key)}`, upstreamStatus: 200 });
    // The 202 said Retry-After: 1 (the test API's retryAfterSeconds): the first poll waited for it.
    expect(polls[0]!.at - proxy.seen[0]!.answeredAt!).toBeGreaterThanOrEqual(950);
  });

  it('throws the typed problem: 422 idempotency_conflict, 400 validation naming the field, 404 not found, a decline', async () => {
    const client = new ChargeguardClient({ baseUrl: api.baseUrl, apiKey: tenantKey, limits: quick });
    const key = newKey('client-conflict');
    await client.createCharge(body('conflict-1', 1_000), { idempotencyKey: key });
    const conflict = await client.createCharge(body('conflict-1', 1_001), { idempotencyKey: key }).catch((error: unknown) => error);
    expect(conflict).toBeInstanceOf(IdempotencyConflictError);
    expect(conflict).toBeInstanceOf(ProblemError);
    expect(conflict).toMatchObject({ status: 422, type: 'idempotency_conflict' });
    expect(await chargesOfOrder(tenantKey, 'conflict-1')).toHaveLength(1);

    const invalid = await client.createCharge({ ...body('invalid-1'), amount: 0 }).catch((error: unknown) => error);
    expect(invalid).toBeInstanceOf(ValidationProblemError);
    expect((invalid as ValidationProblemError).errors).toContainEqual(expect.objectContaining({ field: 'amount' }));

    const missing = await client.getCharge(newKey('never-made')).catch((error: unknown) => error);
    expect(missing).toBeInstanceOf(NotFoundProblemError);
    expect(missing).toMatchObject({ status: 404, type: 'not_found' });

    const { apiKey: poorKey } = await fundedApiTenant(api, { label: 'client-poor', payerMinor: 100 });
    const poor = new ChargeguardClient({ baseUrl: api.baseUrl, apiKey: poorKey });
    const declined = await poor.createCharge(body('declined-1', 5_000)).catch((error: unknown) => error);
    expect(declined).toBeInstanceOf(ChargeDeclinedError);
    expect((declined as ChargeDeclinedError).charge).toMatchObject({ status: 'declined', decline_code: 'insufficient_funds' });
  });

  it('lists every charge of a query page by page (starting_after the last one of each page)', async () => {
    const { apiKey } = await fundedApiTenant(api, { label: 'client-pages', payerMinor: 10_000 });
    const client = new ChargeguardClient({ baseUrl: api.baseUrl, apiKey });
    const made: string[] = [];
    for (let i = 0; i < 5; i += 1) made.push((await client.createCharge(body('pages-1', 100 + i))).idempotency_key);
    await client.createCharge(body('pages-other', 50));
    const listed: string[] = [];
    // The default cursor is the charge's id (ch_…), as Stripe's clients page.
    for await (const charge of client.listCharges({ order_id: 'pages-1', limit: 2 })) listed.push(charge.idempotency_key);
    expect(listed).toHaveLength(5);
    expect(new Set(listed)).toEqual(new Set(made));
    // Newest first, as the route lists them.
    expect(listed).toEqual([...made].reverse());
  });
});
