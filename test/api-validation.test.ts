import { describe, expect, it } from 'vitest';
import { principalForApiKey } from '../src/auth/api-keys.js';
import { chargeFingerprint, refundFingerprint } from '../src/service/intent.js';
import { wireProblemSchema } from '../src/http/problem.js';
import { confirmHold, readCharge, tryHold } from '../src/ledger/charges.js';
import { listCharges } from '../src/ledger/listing.js';
import { listRefunds, readRefund, refundCharge } from '../src/ledger/refunds.js';
import { countLedger } from '../src/ledger/reports.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  newKey,
  newTenant,
  openAccount,
  useHarness,
  workflowExists,
} from './support/harness.js';
import { fundedApiTenant, useApi } from './support/api.js';

const bodyLimitBytes = 4 * 1024;
const h = useHarness();
const api = useApi({ bodyLimitBytes });

async function nothingWritten(tenant: string): Promise<void> {
  const counts = await countLedger(h.pool, tenant);
  expect(counts.charges).toBe(0);
  expect(Object.keys(counts.transfersByKind).filter((kind) => kind !== 'deposit')).toEqual([]);
  await expectLedgerInvariants(h.pool, tenant);
}

describe('malformed requests get a clear 4xx and write nothing', () => {
  it('bad bodies: each offending field is named', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'badbody' });
    await openAccount(h.pool, tenant, 'payee-eur', { currency: 'EUR' });

    const cases: Array<[string, unknown, string, RegExp]> = [
      ['negative amount', chargeBody({ amount: -5 }), 'amount', /at least 1/],
      ['zero amount', chargeBody({ amount: 0 }), 'amount', /at least 1/],
      ['fractional amount', chargeBody({ amount: 10.5 }), 'amount', /integer/],
      ['huge amount', chargeBody({ amount: 1e13 }), 'amount', /at most/],
      ['amount as a string', chargeBody({ amount: '100' }), 'amount', /integer/],
      ['unknown currency', chargeBody({ currency: 'XYZ' }), 'currency', /ISO 4217/],
      ['lower-case currency', chargeBody({ currency: 'usd' }), 'currency', /upper-case/],
      ['missing order_id', { ...chargeBody(), order_id: undefined }, 'order_id', /required/],
      ['unknown field', chargeBody({ amout: 5 }), 'amout', /not a known field/],
      ['unknown payee', chargeBody({ payee_account_id: 'nobody' }), 'payee_account_id', /no account nobody/],
      ['currency mismatch', chargeBody({ payee_account_id: 'payee-eur' }), 'currency', /holds EUR/],
      ['payer is payee', chargeBody({ payee_account_id: 'payer' }), 'payee_account_id', /differ/],
      ['array body', [chargeBody()], 'body', /JSON object/],
    ];
    for (const [label, body, field, message] of cases) {
      const response = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': newKey() } });
      expect(response.status, label).toBe(400);
      expect(response.headers.get('content-type'), label).toMatch(/^application\/problem\+json/);
      const problem = wireProblemSchema.parse(response.body);
      expect(problem.type, label).toBe('validation_error');
      const named = problem.errors?.find((e) => e.field === field);
      expect(named, `${label}: ${JSON.stringify(problem.errors)}`).toBeDefined();
      expect(named!.message, label).toMatch(message);
    }
    await nothingWritten(tenant);
  });

  it('malformed JSON, wrong content type, oversized body: 400, 415, 413', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'badjson' });
    const headers = { 'idempotency-key': newKey() };

    const malformed = await api.request('/v1/charges', { apiKey, rawBody: '{"amount": 10,', headers });
    expect(malformed.status).toBe(400);
    expect(malformed.body).toMatchObject({ type: 'malformed_json', status: 400 });
    expect(malformed.body.errors).toEqual([{ field: 'body', message: 'body is not valid JSON: a member name (a string in double quotes) expected at line 1, column 15' }]);

    const text = await api.request('/v1/charges', { apiKey, rawBody: 'amount=10', headers: { ...headers, 'content-type': 'text/plain' } });
    expect(text.status).toBe(415);
    expect(text.body.type).toBe('unsupported_media_type');

    const oversized = await api.request('/v1/charges', {
      apiKey,
      body: chargeBody({ description: 'x'.repeat(bodyLimitBytes) }),
      headers,
    });
    expect(oversized.status).toBe(413);
    expect(oversized.body.type).toBe('payload_too_large');

    const adminKey = await api.keyFor(tenant, 'admin');
    const negativeDeposit = await api.request('/v1/accounts/payer/deposits', { apiKey: adminKey, body: { amount: -1 }, headers });
    expect(negativeDeposit.status).toBe(400);
    expect(negativeDeposit.body.errors[0].field).toBe('amount');
    const depositWithoutKey = await api.request('/v1/accounts/payer/deposits', { apiKey: adminKey, body: { amount: 1 } });
    expect(depositWithoutKey.status).toBe(400);
    expect(depositWithoutKey.body.errors[0].field).toBe('Idempotency-Key');
    const unknownRoute = await api.request('/v1/nothing', { apiKey });
    expect(unknownRoute.status).toBe(404);
    expect(unknownRoute.headers.get('content-type')).toMatch(/problem\+json/);

    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000);
    await nothingWritten(tenant);
  });

  it('accounts and deposits: create is idempotent, deposits are exactly-once per key or external_id', async () => {
    const tenant = newTenant('accounts');
    const apiKey = await api.keyFor(tenant, 'admin');
    const createKey = newKey('acct');
    const created = await api.request('/v1/accounts', { apiKey, body: { currency: 'EUR' }, headers: { 'idempotency-key': createKey } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ object: 'account', currency: 'EUR', posted: 0, pending: 0, available: 0 });
    const id = created.body.id as string;
    const again = await api.request('/v1/accounts', { apiKey, body: { currency: 'EUR' }, headers: { 'idempotency-key': createKey } });
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(created.body);
    const reused = await api.request('/v1/accounts', { apiKey, body: { currency: 'USD' }, headers: { 'idempotency-key': createKey } });
    expect(reused.status).toBe(422);
    const named = await api.request('/v1/accounts', { apiKey, body: { currency: 'USD', id }, headers: { 'idempotency-key': newKey() } });
    expect(named.status).toBe(409);
    expect(named.body.type).toBe('account_conflict');

    const depositKey = newKey('dep');
    const path = `/v1/accounts/${id}/deposits`;
    const first = await api.request(path, { apiKey, body: { amount: 5_000 }, headers: { 'idempotency-key': depositKey } });
    expect(first.status).toBe(201);
    expect(first.body).toMatchObject({ object: 'deposit', account_id: id, amount: 5_000, currency: 'EUR' });
    const replay = await api.request(path, { apiKey, body: { amount: 5_000 }, headers: { 'idempotency-key': depositKey } });
    expect(replay.status).toBe(200);
    expect(replay.body).toEqual(first.body);
    const mismatch = await api.request(path, { apiKey, body: { amount: 5_001 }, headers: { 'idempotency-key': depositKey } });
    expect(mismatch.status).toBe(422);
    expect(mismatch.body.type).toBe('idempotency_conflict');
    const webhook = { amount: 250, external_id: 'psp_evt_1' };
    const redeliveries = await Promise.all(Array.from({ length: 5 }, () => api.request(path, { apiKey, body: webhook })));
    expect(redeliveries.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 201]);
    const unknownAccount = await api.request('/v1/accounts/nobody/deposits', { apiKey, body: { amount: 1 }, headers: { 'idempotency-key': newKey() } });
    expect(unknownAccount.status).toBe(404);

    const balance = await api.request(`/v1/accounts/${id}`, { apiKey });
    expect(balance.body).toMatchObject({ posted: 5_250, pending: 0, available: 5_250 });
    await expectLedgerInvariants(h.pool, tenant);
  });
});

/** A 400 problem document whose errors name `field` (and, when given, match `message`). */
function expectRefused(response: { status: number; headers: Headers; body: any }, field: string, message?: RegExp): void {
  expect(response.status, JSON.stringify(response.body)).toBe(400);
  expect(response.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  const named = (response.body.errors as Array<{ field: string; message: string }>).find((e) => e.field === field);
  expect(named, `${field} in ${JSON.stringify(response.body.errors)}`).toBeDefined();
  if (message) expect(named!.message).toMatch(message);
}

describe('poison input: each reported case is a fast 400 naming the field, nothing recorded or started', () => {
  it('NUL in order_id, description or a metadata value; a lone surrogate in order_id; BEL in a metadata value', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'poison' });
    const cases: Array<[string, Record<string, unknown>, string, RegExp]> = [
      ['NUL in order_id', { order_id: 'order\u0000x' }, 'order_id', /control characters: U\+0000 at position 5/],
      ['NUL in description', { description: 'nul \u0000' }, 'description', /U\+0000/],
      ['NUL in a metadata value', { metadata: { note: 'a\u0000b' } }, 'metadata.note', /U\+0000/],
      ['NUL in a metadata key', { metadata: { 'no\u0000te': 'x' } }, 'metadata.no\u0000te', /U\+0000/],
      ['lone surrogate in order_id', { order_id: 'x\ud800y' }, 'order_id', /lone surrogate U\+D800/],
      ['lone low surrogate in description', { description: '\udc00' }, 'description', /lone surrogate/],
      ['BEL in a metadata value', { metadata: { note: 'ding\u0007' } }, 'metadata.note', /U\+0007/],
      ['C1 control in order_id', { order_id: 'x\u0085' }, 'order_id', /U\+0085/],
      ['DEL in description', { description: 'x\u007f' }, 'description', /U\+007F/],
      ['order_id of 256 characters', { order_id: 'o'.repeat(256) }, 'order_id', /at most 255/],
      ['description of 1001 characters', { description: 'd'.repeat(1001) }, 'description', /at most 1000/],
      ['metadata key of 41 characters', { metadata: { ['k'.repeat(41)]: 'v' } }, `metadata.${'k'.repeat(41)}`, /at most 40/],
      ['metadata value of 501 characters', { metadata: { k: 'v'.repeat(501) } }, 'metadata.k', /at most 500/],
      ['51 metadata keys', { metadata: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata', /at most 50/],
      ['null description', { description: null }, 'description', /null is not a value/],
      ['amount 1e300', { amount: 1e300 }, 'amount', /integer|at most/],
      ['amount above 2^53', { amount: 2 ** 53 + 2 }, 'amount', /integer|at most/],
      ['amount as a string', { amount: 'NaN' }, 'amount', /integer/],
      ['amount null', { amount: null }, 'amount', /null is not a value/],
    ];
    for (const [label, overrides, field, message] of cases) {
      const key = newKey('poison');
      const startedAtMs = performance.now();
      const response = await api.request('/v1/charges', { apiKey, body: chargeBody(overrides), headers: { 'idempotency-key': key } });
      const elapsedMs = performance.now() - startedAtMs;
      expectRefused(response, field, message);
      // Decided before any Temporal or ledger step: milliseconds, not the ~10 s of a retried Try.
      expect(elapsedMs, label).toBeLessThan(1_000);
      expect(await workflowExists(h, `charge/${tenant}/${key}`), label).toBe(false);
    }
    // Text that is valid is stored exactly as sent, tab and line breaks in the description included.
    const exact = chargeBody({ order_id: 'ord-é-日本-😀', description: 'line 1\r\n\tline 2', metadata: { 'clé 😀': 'välue ✓' } });
    const created = await api.request('/v1/charges', { apiKey, body: exact, headers: { 'idempotency-key': newKey() } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ order_id: exact.order_id, description: exact.description, metadata: exact.metadata });
    const stored = (await listCharges(h.pool, tenant, { limit: 100 })).charges;
    expect(stored.map(({ orderId, description, metadata }) => ({ orderId, description, metadata }))).toEqual([
      { orderId: exact.order_id, description: exact.description, metadata: exact.metadata },
    ]);
  });

  it('%00 and other malformed ids in paths and queries are 400s naming the parameter, not 500s', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'poison-path' });
    const idempotencyKey = { 'idempotency-key': newKey() };
    expectRefused(await api.request('/v1/accounts/%00', { apiKey }), 'id', /U\+0000/);
    expectRefused(await api.request('/v1/accounts/%00/deposits', { apiKey: await api.keyFor(tenant, 'admin'), body: { amount: 1 }, headers: idempotencyKey }), 'id');
    expectRefused(await api.request('/v1/accounts/a%2Fb', { apiKey }), 'id', /U\+002F/);
    expectRefused(await api.request(`/v1/accounts/${'a'.repeat(65)}`, { apiKey }), 'id', /at most 64/);
    expectRefused(await api.request('/v1/charges?order_id=%00', { apiKey }), 'order_id', /U\+0000/);
    expectRefused(await api.request('/v1/charges?status=%00', { apiKey }), 'status');
    expectRefused(await api.request('/v1/charges?limit=1e2', { apiKey }), 'limit');
    expectRefused(await api.request('/v1/charges?limit=0', { apiKey }), 'limit');
    expectRefused(await api.request('/v1/charges?starting_after=%00', { apiKey }), 'starting_after');
    expectRefused(await api.request('/v1/charges?payer_account_id=%07', { apiKey }), 'payer_account_id');
    expectRefused(await api.request('/v1/charges?order_id=a&order_id=b', { apiKey }), 'order_id', /once/);
    expectRefused(await api.request('/v1/charges?ordr_id=a', { apiKey }), 'ordr_id', /not a known/);
    expectRefused(await api.request('/v1/charges/%00', { apiKey }), 'key', /U\+0000/);
    expectRefused(await api.request('/v1/charges/%00/cancel', { apiKey, method: 'POST' }), 'key');
    expectRefused(await api.request('/v1/charges/%07/capture', { apiKey, body: {} }), 'key');
    expectRefused(await api.request('/v1/charges/%00/refunds', { apiKey, body: {}, headers: idempotencyKey }), 'key');
    expectRefused(await api.request('/v1/charges/k/refunds/%00', { apiKey }), 'refundKey');
    expectRefused(await api.request(`/v1/charges/${'k'.repeat(256)}`, { apiKey }), 'key', /at most 255/);
    expectRefused(await api.request('/v1/charges', { apiKey, body: chargeBody(), headers: { 'idempotency-key': 'two words' } }), 'Idempotency-Key');
    expectRefused(await api.request('/v1/charges', { apiKey, body: chargeBody(), headers: { 'idempotency-key': 'k'.repeat(256) } }), 'Idempotency-Key');
    // Keys may hold "/" and "%" (visible ASCII): percent-encoded, they name a charge that does not exist.
    const slashy = await api.request(`/v1/charges/${encodeURIComponent('a/b%c')}`, { apiKey });
    expect(slashy.status).toBe(404);
    await nothingWritten(tenant);
  });

  it('null amount on capture and refund is a 400; cancel with any field is a 400; unknown fields on accounts and deposits too', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'poison-null' });
    const manualKey = newKey('manual');
    const manual = await api.request('/v1/charges', { apiKey, body: chargeBody({ capture: 'manual' }), headers: { 'idempotency-key': manualKey } });
    expect(manual.body.status).toBe('reserved');
    const autoKey = newKey('auto');
    const auto = await api.request('/v1/charges', { apiKey, body: chargeBody({ amount: 4_800 }), headers: { 'idempotency-key': autoKey } });
    expect(auto.body.status).toBe('succeeded');

    expectRefused(await api.request(`/v1/charges/${manualKey}/capture`, { apiKey, body: { amount: null } }), 'amount', /null is not a value/);
    expectRefused(await api.request(`/v1/charges/${manualKey}/capture`, { apiKey, body: { amount: 1.5 } }), 'amount');
    expectRefused(await api.request(`/v1/charges/${manualKey}/capture`, { apiKey, body: { amount: '500' } }), 'amount');
    expectRefused(await api.request(`/v1/charges/${manualKey}/capture`, { apiKey, body: { amount: 500, note: 'x' } }), 'note');
    expectRefused(await api.request(`/v1/charges/${manualKey}/capture`, { apiKey, rawBody: 'null' }), 'body');
    expectRefused(await api.request(`/v1/charges/${manualKey}/cancel`, { apiKey, body: { reason: 'x' } }), 'reason', /no parameters/);
    expectRefused(await api.request(`/v1/charges/${manualKey}/cancel`, { apiKey, body: [] }), 'body');
    expect((await api.request(`/v1/charges/${manualKey}`, { apiKey })).body).toMatchObject({ status: 'reserved', amount_captured: 0 });

    const refund = (body: unknown) =>
      api.request(`/v1/charges/${autoKey}/refunds`, { apiKey, body, headers: { 'idempotency-key': newKey('refund') } });
    expectRefused(await refund({ amount: null }), 'amount', /null is not a value/);
    expectRefused(await refund({ amount: 1e300 }), 'amount');
    expectRefused(await refund({ amount: 100, reason: 'x' }), 'reason');
    expect((await countLedger(h.pool, tenant)).refunds).toEqual({ succeeded: 0, failed: 0 });
    expect((await api.request(`/v1/charges/${autoKey}`, { apiKey })).body).toMatchObject({ status: 'succeeded', amount_refunded: 0 });

    // The cancel that takes no parameters still works without a body and with {}.
    const cancelled = await api.request(`/v1/charges/${manualKey}/cancel`, { apiKey, body: {} });
    expect(cancelled.status).toBe(200);
    expect(cancelled.body.status).toBe('cancelled');
    const again = await api.request(`/v1/charges/${manualKey}/cancel`, { apiKey, method: 'POST' });
    expect(again.status, JSON.stringify(again.body)).toBe(200);

    const createKey = { 'idempotency-key': newKey('acct') };
    const adminKey = await api.keyFor(tenant, 'admin');
    expectRefused(await api.request('/v1/accounts', { apiKey: adminKey, body: { currency: 'USD', colour: 'red' }, headers: createKey }), 'colour');
    expectRefused(await api.request('/v1/accounts', { apiKey: adminKey, body: { currency: 'USD', id: 'x\u0000' }, headers: createKey }), 'id');
    expectRefused(await api.request('/v1/accounts', { apiKey: adminKey, body: { currency: 'USD', allow_overdraft: null }, headers: createKey }), 'allow_overdraft');
    expectRefused(
      await api.request('/v1/accounts/payer/deposits', { apiKey: adminKey, body: { amount: 1, memo: 'x' }, headers: { 'idempotency-key': newKey() } }),
      'memo',
    );
    expectRefused(await api.request('/v1/accounts/payer/deposits', { apiKey: adminKey, body: { amount: 1, external_id: 'e\u0000' } }), 'external_id');
    expect((await api.request('/v1/accounts/payer', { apiKey })).body).toMatchObject({ posted: 10_000 - 4_800 });
    await expectLedgerInvariants(h.pool, tenant);
  });
});

describe('the request fingerprint covers the whole body and carries a version', () => {
  it('a retry that changes description or metadata is a 422 idempotency_conflict', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'fp-v2' });
    const key = newKey('fp');
    const body = chargeBody({ description: 'first', metadata: { cart: '1' } });
    const first = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': key } });
    expect(first.status).toBe(201);
    expect((await readCharge(h.pool, tenant, key))?.fingerprint).toMatch(/^v2:[0-9a-f]{64}$/);
    // Key order and an explicit default do not make another request: canonical JSON of the validated body.
    const reordered = Object.fromEntries(Object.entries({ ...body, capture: 'automatic' }).reverse());
    const replay = await api.request('/v1/charges', { apiKey, body: reordered, headers: { 'idempotency-key': key } });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    for (const changed of [{ description: 'second' }, { metadata: { cart: '2' } }, { metadata: { cart: '1', extra: 'x' } }, { description: undefined }]) {
      const retry = await api.request('/v1/charges', { apiKey, body: { ...body, ...changed }, headers: { 'idempotency-key': key } });
      expect(retry.status, JSON.stringify(changed)).toBe(422);
      expect(retry.body.type).toBe('idempotency_conflict');
    }
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
  });

  it('keys recorded under the v1 fingerprint (business fields only) still replay and still conflict', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'fp-v1' });
    const client = h.client;
    // The rows below are written as the API would have, under the tenant's key: the ledger accepts
    // no keyless step in a tenant that has keys.
    const actingKeyId = (await principalForApiKey(h.pool, apiKey))!.keyId;

    // A decided charge recorded by an older version: Try and Confirm with a bare 64-hex fingerprint.
    const decidedKey = newKey('v1-decided');
    const body = chargeBody({ amount: 700, description: 'old' });
    const intent = client.buildIntent(tenant, decidedKey, body);
    const v1 = { ...intent, fingerprint: chargeFingerprint(intent.request, 1), actingKeyId };
    expect(v1.fingerprint).toMatch(/^[0-9a-f]{64}$/);
    await tryHold(h.pool, v1, 60_000);
    await confirmHold(h.pool, tenant, decidedKey, null);
    const replay = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': decidedKey } });
    expect(replay.status).toBe(200);
    expect(replay.body).toMatchObject({ status: 'succeeded', amount: 700 });
    const conflict = await api.request('/v1/charges', { apiKey, body: { ...body, amount: 701 }, headers: { 'idempotency-key': decidedKey } });
    expect(conflict.status).toBe(422);

    // A held charge recorded by an older version whose workflow Temporal no longer knows: the new
    // execution must carry the v1 fingerprint, or the ledger's Try would refuse it as key reuse.
    const heldKey = newKey('v1-held');
    const heldBody = chargeBody({ amount: 300, capture: 'manual' });
    const heldIntent = client.buildIntent(tenant, heldKey, heldBody);
    await tryHold(h.pool, { ...heldIntent, fingerprint: chargeFingerprint(heldIntent.request, 1), actingKeyId }, 60_000);
    const attached = await api.request('/v1/charges', { apiKey, body: heldBody, headers: { 'idempotency-key': heldKey } });
    expect(attached.status, JSON.stringify(attached.body)).toBeLessThan(300);
    expect(attached.body.status).toBe('reserved');
    const described = await h.temporal.workflow.getHandle(`charge/${tenant}/${heldKey}`).describe();
    expect(described.memo).toMatchObject({ fingerprint: chargeFingerprint(heldIntent.request, 1) });
    const heldConflict = await api.request('/v1/charges', { apiKey, body: { ...heldBody, amount: 301 }, headers: { 'idempotency-key': heldKey } });
    expect(heldConflict.status).toBe(422);
    const captured = await api.request(`/v1/charges/${heldKey}/capture`, { apiKey, body: {} });
    expect(captured.body).toMatchObject({ status: 'succeeded', amount_captured: 300 });

    // A refund recorded by an older version: the same request replays it, another amount conflicts.
    const refundKey = newKey('v1-refund');
    const refundIntent = client.buildRefundIntent(tenant, decidedKey, refundKey, { amount: 200 });
    await refundCharge(h.pool, { ...refundIntent, fingerprint: refundFingerprint(200, 1), actingKeyId });
    const refundReplay = await api.request(`/v1/charges/${decidedKey}/refunds`, { apiKey, body: { amount: 200 }, headers: { 'idempotency-key': refundKey } });
    expect(refundReplay.status, JSON.stringify(refundReplay.body)).toBe(200);
    expect(refundReplay.body).toMatchObject({ status: 'succeeded', amount: 200 });
    const refundConflict = await api.request(`/v1/charges/${decidedKey}/refunds`, { apiKey, body: { amount: 201 }, headers: { 'idempotency-key': refundKey } });
    expect(refundConflict.status).toBe(422);
    const newRefundKey = newKey('v2-refund');
    const newRefund = await api.request(`/v1/charges/${decidedKey}/refunds`, { apiKey, body: {}, headers: { 'idempotency-key': newRefundKey } });
    expect(newRefund.status).toBe(201);
    const { succeeded, failed } = (await countLedger(h.pool, tenant)).refunds;
    expect(succeeded + failed).toBe(2);
    const refunds = await listRefunds(h.pool, tenant, decidedKey);
    expect(refunds.map((r) => r.refundKey)).toEqual([refundKey, newRefundKey]);
    const fingerprints = await Promise.all(refunds.map(async (r) => (await readRefund(h.pool, tenant, decidedKey, r.refundKey))?.fingerprint));
    expect(fingerprints).toEqual([refundFingerprint(200, 1), expect.stringMatching(/^v2:[0-9a-f]{64}$/)]);
    expect(await captureCount(h.pool, tenant, decidedKey)).toBe(1);
    await expectLedgerInvariants(h.pool, tenant);
  });
});
