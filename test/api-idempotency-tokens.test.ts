import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, inject, it } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import { buildApi } from '../src/api/app.js';
import { createApiKey } from '../src/auth/api-keys.js';
import { loadConfig } from '../src/config.js';
import { ChargeService } from '../src/service/charge-service.js';
import { appContextOn, type AppContext } from '../src/runtime/app-context.js';
import { findFreePort } from '../src/support/free-port.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { noMandate } from '../src/domain/mandate.js';
import { limits } from '../src/domain/limits.js';
import { captureTotals, countLedger } from '../src/ledger/reports.js';
import { wireIdempotencyTokenSchema } from '../src/service/idempotency-tokens.js';
import { wireChargeSchema } from '../src/service/wire.js';
import { wireProblemSchema } from '../src/http/problem.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  newKey,
  testPolicy,
  useHarness,
  waitFor,
  workflowExists,
  testDataConverter,
} from './support/harness.js';
import { fundedApiTenant, useApi } from './support/api.js';

const h = useHarness();
const api = useApi();

const fundedTenant = (label: string, payerMinor = 100_000) => fundedApiTenant(api, { label, payerMinor });

async function issueToken(apiKey: string, body?: unknown): Promise<{ token: string; expires_at: string }> {
  const response = await api.request('/v1/idempotency-tokens', { method: 'POST', apiKey, ...(body === undefined ? {} : { body }) });
  expect(response.status, JSON.stringify(response.body)).toBe(201);
  return wireIdempotencyTokenSchema.parse(response.body);
}

function chargeWithToken(apiKey: string | null, token: string, body: unknown, headers: Record<string, string> = {}) {
  return api.request('/v1/charges', { method: 'POST', apiKey, body, headers: { 'idempotency-token': token, ...headers } });
}

function tokenHash(token: string): string {
  return createHash('sha256').update(token, 'utf8').digest('hex');
}

async function tokenRow(tenant: string, token: string): Promise<{ consumed_at: Date | null; issued_by_key_id: string | null } | undefined> {
  const { rows } = await h.pool.query<{ consumed_at: Date | null; issued_by_key_id: string | null }>(
    'SELECT consumed_at, issued_by_key_id FROM idempotency_tokens WHERE tenant = $1 AND token_hash = $2',
    [tenant, tokenHash(token)],
  );
  return rows[0];
}

/** Lets a token's lifetime run out without waiting for it. */
async function expireToken(tenant: string, token: string): Promise<void> {
  const { rowCount } = await h.pool.query(
    `UPDATE idempotency_tokens SET created_at = now() - interval '1 hour', expires_at = now() - interval '1 second'
      WHERE tenant = $1 AND token_hash = $2`,
    [tenant, tokenHash(token)],
  );
  expect(rowCount).toBe(1);
}

async function countExecutions(workflowId: string): Promise<number> {
  let n = 0;
  for await (const _ of h.temporal.workflow.list({ query: `WorkflowId = '${workflowId}'` })) n++;
  return n;
}

/** The shared ledger, but a Temporal address where nothing listens: every start fails as unavailable. */
async function deadTemporalContext(): Promise<AppContext> {
  const config = loadConfig({});
  const address = `127.0.0.1:${await findFreePort()}`;
  const connection = Connection.lazy({ address });
  const temporal = new Client({ connection, namespace: 'default', dataConverter: testDataConverter() });
  return appContextOn({
    config,
    endpoints: { temporalAddress: address, databaseUrl: inject('stack').databaseUrl },
    temporal,
    ledger: h.pool,
    charges: new ChargeService({
      temporal,
      ledger: h.pool,
      policy: testPolicy,
      amountMinorMax: config.CHARGE_AMOUNT_MINOR_MAX,
      waitBudgetMs: 5_000,
      startTimeoutMs: 1_000,
    }),
    close: () => connection.close(),
  });
}

function expectTokenRefused(response: { status: number; body: any; headers: Headers }, message: RegExp): void {
  expect(response.status, JSON.stringify(response.body)).toBe(400);
  expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(wireProblemSchema.parse(response.body)).toMatchObject({ type: 'validation_error', status: 400 });
  expect(response.body.errors).toEqual([{ field: 'Idempotency-Token', message: expect.stringMatching(message) }]);
}

const unknownOrExpired = /^is unknown to this tenant, or expired before it was used/;

describe('POST /v1/idempotency-tokens', () => {
  it('issues a 256-bit token that is a valid idempotency key, good for 15 minutes unless asked for less', async () => {
    const { tenant, apiKey } = await fundedTenant('token-issue');
    const before = Date.now();
    const issued = await issueToken(apiKey);
    expect(issued.token).toMatch(/^idt_[A-Za-z0-9_-]{43}$/);
    const ttlMs = Date.parse(issued.expires_at) - before;
    // The database clock decides; allow it a few seconds of skew against this process's.
    expect(ttlMs).toBeGreaterThan(limits.idempotencyTokenTtlMs - 5_000);
    expect(ttlMs).toBeLessThan(limits.idempotencyTokenTtlMs + 5_000);
    expect(await tokenRow(tenant, issued.token)).toMatchObject({ consumed_at: null, issued_by_key_id: expect.stringMatching(/^key_/) });

    const issuedAgain = await api.request('/v1/idempotency-tokens', { method: 'POST', apiKey, body: {} });
    expect(issuedAgain.headers.get('cache-control')).toBe('no-store');

    // Expired and never used: deleted the next time the tenant is issued a token.
    await expireToken(tenant, issued.token);
    const short = await issueToken(apiKey, { ttl_seconds: 60 });
    expect(await tokenRow(tenant, issued.token)).toBeUndefined();
    expect(Math.abs(Date.parse(short.expires_at) - Date.now() - 60_000)).toBeLessThan(5_000);
    expect(short.token).not.toBe(issued.token);

    // Both roles may issue; a request without a key may not.
    const admin = await api.keyFor(tenant, 'admin');
    await issueToken(admin, {});
    const anonymous = await api.request('/v1/idempotency-tokens', { method: 'POST', apiKey: null });
    expect(anonymous.status).toBe(401);
    expect(anonymous.body).toMatchObject({ type: 'unauthorized' });
  });

  it('refuses a lifetime outside its bounds and unknown fields, naming the field; nothing is issued', async () => {
    const { tenant, apiKey } = await fundedTenant('token-issue-bad');
    const cases: Array<[unknown, string, RegExp]> = [
      [{ ttl_seconds: 0 }, 'ttl_seconds', /^must be at least 1$/],
      [{ ttl_seconds: 901 }, 'ttl_seconds', /^must be at most 900/],
      [{ ttl_seconds: 1.5 }, 'ttl_seconds', /^must be an integer written as one, without a fraction or exponent/],
      [{ ttl_seconds: null }, 'ttl_seconds', /null is not a value/],
      [{ ttl_seconds: '60' }, 'ttl_seconds', /whole number of seconds/],
      [{ ttl: 60 }, 'ttl', /^is not a known field$/],
      [[], 'body', /^must be a JSON object$/],
    ];
    for (const [body, field, message] of cases) {
      const response = await api.request('/v1/idempotency-tokens', { method: 'POST', apiKey, body });
      expect(response.status, JSON.stringify(body)).toBe(400);
      expect(response.body.errors, JSON.stringify(body)).toEqual([{ field, message: expect.stringMatching(message) }]);
    }
    const { rows } = await h.pool.query('SELECT 1 FROM idempotency_tokens WHERE tenant = $1', [tenant]);
    expect(rows).toHaveLength(0);
  });
  it('is in the OpenAPI document, and so is the Idempotency-Token header of a create', async () => {
    const document = (await api.request('/openapi.json')).body;
    const issue = document.paths['/v1/idempotency-tokens'].post;
    expect(Object.keys(issue.responses).sort()).toEqual(['201', '400', '401', '413', '415', '429', '503']);
    expect(issue.responses['201'].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/IdempotencyToken' });
    expect(document.components.schemas.IssueIdempotencyTokenRequest.properties.ttl_seconds).toMatchObject({ type: 'integer', minimum: 1, maximum: 900 });
    const header = document.paths['/v1/charges'].post.parameters.find((p: { name: string }) => p.name === 'idempotency-token');
    expect(header).toMatchObject({ in: 'header', required: false, schema: { minLength: 47, maxLength: 47 } });
    expect(new RegExp(header.schema.pattern).test((await issueToken((await fundedTenant('token-openapi')).apiKey)).token)).toBe(true);
  });
});

describe('POST /v1/charges with Idempotency-Token', () => {
  it('the first use makes the token the charge\'s key: 201, replays 200, another body 422, and it works as a key after its expiry', async () => {
    const { tenant, apiKey } = await fundedTenant('token-use');
    const { token } = await issueToken(apiKey);
    const body = chargeBody({ amount: 2_500 });

    const first = await chargeWithToken(apiKey, token, body);
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    expect(wireChargeSchema.parse(first.body)).toMatchObject({ idempotency_key: token, status: 'succeeded', amount: 2_500 });
    expect(first.headers.get('location')).toBe(`/v1/charges/${encodeURIComponent(token)}`);
    expect((await tokenRow(tenant, token))?.consumed_at).toBeInstanceOf(Date);

    const again = await chargeWithToken(apiKey, token, body);
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.text).toBe(first.text);

    const other = await chargeWithToken(apiKey, token, { ...body, amount: 2_501 });
    expect(other.status).toBe(422);
    expect(other.body).toMatchObject({ type: 'idempotency_conflict' });

    // The token is the charge's key everywhere keys go.
    const read = await api.request(`/v1/charges/${encodeURIComponent(token)}`, { apiKey });
    expect(read.body).toEqual(first.body);

    // Used, it never expires: a late retry still replays, even after the purge of expired tokens
    // that issuing a new one runs.
    await expireToken(tenant, token);
    await issueToken(apiKey);
    expect(await tokenRow(tenant, token)).toBeDefined();
    const late = await chargeWithToken(apiKey, token, body);
    expect(late.status).toBe(200);
    expect(late.text).toBe(first.text);

    expect(await captureCount(h.pool, tenant, token)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100_000 - 2_500);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('100 concurrent first uses of one fresh token: one workflow, one charge, one debit; every answer is that charge', async () => {
    const { tenant, apiKey } = await fundedTenant('token-concurrent');
    const { token } = await issueToken(apiKey);
    const body = chargeBody({ amount: 1_234 });

    const responses = await Promise.all(Array.from({ length: 100 }, () => chargeWithToken(apiKey, token, body)));

    const statuses = responses.map((r) => r.status);
    expect(statuses.every((s) => s === 200 || s === 201 || s === 202), statuses.join(',')).toBe(true);
    expect(statuses.filter((s) => s === 201).length).toBeLessThanOrEqual(1);
    expect(new Set(responses.map((r) => wireChargeSchema.parse(r.body).id)).size).toBe(1);
    expect(new Set(responses.map((r) => r.body.idempotency_key))).toEqual(new Set([token]));
    const decided = responses.filter((r) => r.status !== 202);
    expect(new Set(decided.map((r) => r.text)).size).toBe(1);
    expect(decided.filter((r) => r.headers.get('idempotent-replayed') === 'true')).toHaveLength(statuses.filter((s) => s === 200).length);

    // Whatever answered 202 ends as the same charge.
    const final = await waitFor(async () => {
      const read = await api.request(`/v1/charges/${encodeURIComponent(token)}`, { apiKey });
      return read.body?.status === 'succeeded' ? read : null;
    }, { what: 'the charge to succeed' });
    expect(final.body.id).toBe(responses[0]!.body.id);

    expect(await waitFor(() => countExecutions(chargeWorkflowId(tenant, token)), { what: 'the workflow in visibility' })).toBe(1);
    const listed = await api.request('/v1/charges', { apiKey });
    expect(listed.body.data.map((c: { idempotency_key: string }) => c.idempotency_key)).toEqual([token]);
    expect(await captureTotals(h.pool, tenant)).toEqual({ chargeRows: 1, confirmedRows: 1, captureTransfers: 1, keysCapturedMoreThanOnce: 0, debitedMinor: 1_234 });
    expect(await captureCount(h.pool, tenant, token)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100_000 - 1_234);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('an unknown token, another tenant\'s, an expired unused one or a malformed one: 400 naming Idempotency-Token, nothing started', async () => {
    const { tenant, apiKey } = await fundedTenant('token-refused');
    const other = await fundedTenant('token-other');
    const before = await countLedger(h.pool, tenant);
    const body = chargeBody();

    const unknown = `idt_${randomBytes(32).toString('base64url')}`;
    const othersToken = (await issueToken(other.apiKey)).token;
    const expired = (await issueToken(apiKey)).token;
    await expireToken(tenant, expired);

    for (const [label, token] of [['unknown', unknown], ["another tenant's", othersToken], ['expired unused', expired]] as const) {
      const response = await chargeWithToken(apiKey, token, body);
      expectTokenRefused(response, unknownOrExpired);
      expect(await workflowExists(h, chargeWorkflowId(tenant, token)), label).toBe(false);
      expect(await workflowExists(h, chargeWorkflowId(other.tenant, token)), label).toBe(false);
    }
    for (const malformed of ['key-of-my-own', `idt_${'a'.repeat(42)}`, `idt_${'a'.repeat(42)}*`]) {
      expectTokenRefused(await chargeWithToken(apiKey, malformed, body), /^is not a token this API issues/);
    }
    expect(await countLedger(h.pool, tenant)).toEqual(before);
    // Refusals spend nothing: the other tenant's token is still unused and still works for it.
    expect((await tokenRow(other.tenant, othersToken))?.consumed_at).toBeNull();
    expect((await tokenRow(tenant, expired))?.consumed_at).toBeNull();
    const own = await chargeWithToken(other.apiKey, othersToken, body);
    expect(own.status).toBe(201);
    expect(own.body.idempotency_key).toBe(othersToken);
  });

  it('a first use whose start fails (Temporal unreachable: 503) has used the token; the retry, even after expiry, charges once', async () => {
    const { tenant, apiKey } = await fundedTenant('token-outage');
    const { token } = await issueToken(apiKey);
    const body = chargeBody({ amount: 900 });

    const context = await deadTemporalContext();
    const deadApi = await buildApi({ context, temporalCallTimeoutMs: 1_000 });
    try {
      const down = await deadApi.inject({
        method: 'POST',
        url: '/v1/charges',
        headers: { authorization: `Bearer ${apiKey}`, 'idempotency-token': token, 'content-type': 'application/json' },
        payload: JSON.stringify(body),
      });
      expect(down.statusCode, down.body).toBe(503);
      expect(JSON.parse(down.body)).toMatchObject({ type: 'service_unavailable', dependency: 'temporal' });
    } finally {
      await deadApi.close();
      await context.close();
    }
    expect((await tokenRow(tenant, token))?.consumed_at).toBeInstanceOf(Date);
    expect(await workflowExists(h, chargeWorkflowId(tenant, token))).toBe(false);

    await expireToken(tenant, token);
    const retry = await chargeWithToken(apiKey, token, body);
    expect(retry.status, JSON.stringify(retry.body)).toBe(201);
    expect(retry.body).toMatchObject({ idempotency_key: token, status: 'succeeded', amount: 900 });
    expect(await captureCount(h.pool, tenant, token)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100_000 - 900);
  });

  it('a body or mandate refusal leaves the token unused; both headers, neither, and no API key are refused', async () => {
    const { tenant, apiKey } = await fundedTenant('token-headers');
    const { token } = await issueToken(apiKey);
    const before = await countLedger(h.pool, tenant);

    const badBody = await chargeWithToken(apiKey, token, chargeBody({ amount: -1 }));
    expect(badBody.status).toBe(400);
    expect(badBody.body.errors).toEqual([expect.objectContaining({ field: 'amount' })]);
    expect((await tokenRow(tenant, token))?.consumed_at).toBeNull();

    // Mandates apply as with a key: refused before the token is touched.
    const mandated = await createApiKey(h.pool, tenant, 'small agent', 'agent', { ...noMandate, maxAmountMinor: 500 });
    const overMandate = await chargeWithToken(mandated.key, token, chargeBody({ amount: 501 }));
    expect(overMandate.status).toBe(403);
    expect(overMandate.body).toMatchObject({ type: 'mandate_exceeded', rule: 'max_amount' });
    expect((await tokenRow(tenant, token))?.consumed_at).toBeNull();

    const both = await chargeWithToken(apiKey, token, chargeBody(), { 'idempotency-key': newKey() });
    expect(both.status).toBe(400);
    expect(both.body.errors.map((e: { field: string }) => e.field)).toEqual(['Idempotency-Key', 'Idempotency-Token']);
    expect(both.body.errors[0].message).toMatch(/^cannot be sent with Idempotency-Token/);

    const neither = await api.request('/v1/charges', { method: 'POST', apiKey, body: chargeBody() });
    expect(neither.status).toBe(400);
    expect(neither.body.errors).toEqual([expect.objectContaining({ field: 'Idempotency-Key', message: expect.stringMatching(/^is required/) })]);

    const anonymous = await chargeWithToken(null, token, chargeBody());
    expect(anonymous.status).toBe(401);

    expect((await tokenRow(tenant, token))?.consumed_at).toBeNull();
    expect(await workflowExists(h, chargeWorkflowId(tenant, token))).toBe(false);
    expect(await countLedger(h.pool, tenant)).toEqual(before);

    // Still fresh: its first real use charges.
    const used = await chargeWithToken(apiKey, token, chargeBody({ amount: 700 }));
    expect(used.status).toBe(201);
    expect(used.body).toMatchObject({ idempotency_key: token, amount: 700, status: 'succeeded' });
  });
});
