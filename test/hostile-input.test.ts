import type { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listApiKeys } from '../src/ledger/api-keys.js';
import { readCharge } from '../src/ledger/charges.js';
import { countLedger, type LedgerCounts } from '../src/ledger/reports.js';
import { reservedMemberNames } from '../src/support/strict-json.js';
import { balanceOf, chargeBody, expectLedgerInvariants, newKey, useHarness, workflowExists } from './support/harness.js';
import { fundedApiTenant, useApi, type TestResponse } from './support/api.js';
import { runCli } from './support/cli.js';
import { callTool, mcpOverHttp } from './support/mcp.js';

/**
 * Generated hostile input against every route and MCP tool of the real stack (API, Temporal dev
 * server, PostgreSQL). Whatever arrives: never a 5xx, every refusal a 4xx naming the field at
 * fault, nothing started in Temporal, nothing changed in the ledger. Valid text, however exotic,
 * is stored exactly as sent.
 */

const numRuns = 60;
const h = useHarness();
const api = useApi();
let mcp: McpClient;
let tenant: string;
let apiKey: string;
/** The same tenant's admin key, for the routes only admins may call (opening accounts, deposits). */
let adminKey: string;
/** A succeeded automatic charge and a reserved manual one, for the routes that need a real charge. */
const succeededKey = newKey('hostile-auto');
const reservedKey = newKey('hostile-manual');
const refusalTimesMs: number[] = [];

beforeAll(async () => {
  ({ tenant, apiKey } = await fundedApiTenant(api, { label: 'hostile', payerMinor: 1_000_000 }));
  adminKey = await api.keyFor(tenant, 'admin');
  const auto = await api.request('/v1/charges', { apiKey, body: chargeBody({ amount: 5_000 }), headers: { 'idempotency-key': succeededKey } });
  expect(auto.body.status).toBe('succeeded');
  const manual = await api.request('/v1/charges', {
    apiKey,
    body: chargeBody({ amount: 3_000, capture: 'manual' }),
    headers: { 'idempotency-key': reservedKey },
  });
  expect(manual.body.status).toBe('reserved');
  const { client, transport } = mcpOverHttp(api.baseUrl, apiKey);
  await client.connect(transport);
  mcp = client;
});

afterAll(async () => {
  await mcp?.close();
  if (refusalTimesMs.length > 0) {
    const sorted = [...refusalTimesMs].sort((a, b) => a - b);
    const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!.toFixed(1);
    process.stdout.write(`hostile input: ${sorted.length} refusals, p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms\n`);
  }
});

// ---- generators ---------------------------------------------------------------------------------

/** Well-formed text around the poison, so that the poison is what makes the value invalid. */
const wellFormed = fc.string({ unit: 'grapheme', maxLength: 8 }).filter((s) => !/[\p{Cc}]/u.test(s));
const codeUnit = (min: number, max: number) => fc.integer({ min, max }).map((c) => String.fromCharCode(c));
/** Every control character (C0, DEL, C1) and lone surrogates of both halves. */
const anyControl = fc.oneof(codeUnit(0x00, 0x1f), fc.constant('\u007f'), codeUnit(0x80, 0x9f));
const loneSurrogate = fc.oneof(codeUnit(0xd800, 0xdbff), codeUnit(0xdc00, 0xdfff));
/** What a description may not hold: tab, line feed and carriage return are allowed there. */
const controlButLineBreaks = anyControl.filter((c) => !['\t', '\n', '\r'].includes(c));

function poisoned(poison: fc.Arbitrary<string>): fc.Arbitrary<string> {
  return fc.tuple(wellFormed, poison, wellFormed).map(([before, bad, after]) => `${before}${bad}${after}`);
}

function tooLong(maxLength: number): fc.Arbitrary<string> {
  return fc.tuple(fc.integer({ min: maxLength + 1, max: maxLength + 40 }), fc.constantFrom('x', 'é', '😀', '%', '/')).map(([n, c]) => c.repeat(n));
}

/** Single-line text of at most `maxLength` characters, made invalid. */
const hostileLine = (maxLength: number) => fc.oneof(poisoned(anyControl), poisoned(loneSurrogate), tooLong(maxLength));
const hostileDescription = fc.oneof(poisoned(controlButLineBreaks), poisoned(loneSurrogate), tooLong(1_000));

/** Ids of [A-Za-z0-9_.:-]{1,64} made invalid, "%" and "/" included. */
const hostileAccountId = fc.oneof(
  fc.constant(''),
  tooLong(64),
  fc
    .tuple(
      fc.stringMatching(/^[a-z0-9]{0,5}$/),
      fc.oneof(fc.constantFrom('/', '%', ' ', '#', '?', 'é', '日', '😀', '+', '\\'), anyControl, loneSurrogate),
      fc.stringMatching(/^[a-z0-9]{0,5}$/),
    )
    .map(([a, bad, b]) => `${a}${bad}${b}`),
);

/** Idempotency keys (1-255 visible ASCII) made invalid. */
const hostileKey = fc.oneof(
  fc.constant(''),
  tooLong(255),
  fc
    .tuple(fc.stringMatching(/^[!-~]{1,5}$/), fc.oneof(fc.constantFrom(' ', 'é', '日', '😀', '\u00a0'), anyControl, loneSurrogate), fc.stringMatching(/^[!-~]{0,5}$/))
    .map(([a, bad, b]) => `${a}${bad}${b}`),
);

/** Header values fetch can send (latin-1, no CR/LF/NUL) that are still not valid keys. */
const hostileKeyHeader = fc.oneof(
  fc.stringMatching(/^[!-~]{256,300}$/),
  fc
    .tuple(fc.stringMatching(/^[!-~]{1,5}$/), fc.constantFrom(' ', '\t', 'é', 'ÿ', '\u0080', '\u00a0'), fc.stringMatching(/^[!-~]{1,5}$/))
    .map(([a, bad, b]) => `${a}${bad}${b}`),
);

/** Amounts that are not an integer in [1, 10^12]: null, fractions, strings, huge, negative, unsafe. */
const hostileAmount: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom(null, 'NaN', '100', '1e3', '', true, false, [], {}, [100], { value: 100 }, 0, -0, 1e300, -1e300, 2 ** 53, 2 ** 53 + 2, 1e12 + 1),
  fc.double({ noNaN: true, noDefaultInfinity: true }).filter((d) => !Number.isInteger(d)),
  fc.integer({ max: 0 }),
  fc.integer({ min: 1e12 + 1, max: Number.MAX_SAFE_INTEGER }),
);

/** A metadata object made invalid: a bad key, a bad value, or too many keys. */
const hostileMetadata = fc.oneof(
  fc.tuple(fc.oneof(hostileLine(40), fc.constant('')), fc.string({ maxLength: 5 })).map(([k, v]) => ({ [k]: v })),
  fc.tuple(fc.stringMatching(/^[a-z]{1,10}$/), hostileLine(500)).map(([k, v]) => ({ [k]: v })),
  fc.integer({ min: 51, max: 60 }).map((n) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']))),
  fc.constantFrom(null, 'text', 5, [], [['k', 'v']], { k: 5 }, { k: null }, { k: ['v'] }),
);

const bodyFields = ['order_id', 'payer_account_id', 'payee_account_id', 'amount', 'currency', 'capture', 'description', 'metadata'] as const;
type BodyField = (typeof bodyFields)[number];

const hostileField: Record<BodyField, fc.Arbitrary<unknown>> = {
  order_id: fc.oneof(hostileLine(255), fc.constantFrom('', null, 42, [], {})),
  payer_account_id: fc.oneof(hostileAccountId, fc.constantFrom(null, 42, [])),
  payee_account_id: fc.oneof(hostileAccountId, fc.constantFrom(null, 42, [])),
  amount: hostileAmount,
  currency: fc.oneof(hostileLine(3), fc.constantFrom('usd', 'US', 'USDD', 'XYZ', '', null, 840)),
  capture: fc.oneof(hostileLine(10), fc.constantFrom('Manual', 'auto', '', null, true)),
  description: fc.oneof(hostileDescription, fc.constantFrom(null, 5, [], {})),
  metadata: hostileMetadata,
};

/** One field of an otherwise valid (and fundable) body replaced by a hostile value. */
const hostileChargeBody = fc.constantFrom(...bodyFields).chain((field) =>
  hostileField[field].map((value) => ({ field, body: { ...chargeBody({ amount: 100 }), [field]: value } as Record<string, unknown> })),
);

const knownNames = [...bodyFields, 'idempotency_key', 'refund_idempotency_key', 'account_id', 'external_id', 'id', 'allow_overdraft', 'limit', 'status', 'starting_after'];
/** A field name no route has ("__proto__" is left to unknownMemberName: a query parameter is not a JSON member). */
const unknownFieldName = fc.string({ minLength: 1, maxLength: 12 }).filter((name) => !knownNames.includes(name) && name !== '__proto__');
/** A body member no route has, the names the JSON decoder refuses in every object included. */
const unknownMemberName = fc.oneof(unknownFieldName, fc.constantFrom(...reservedMemberNames));
/** The same, in words the MCP SDK's message quotes verbatim. */
const unknownArgumentName = fc.oneof(fc.stringMatching(/^[a-z_]{1,12}$/).filter((name) => !knownNames.includes(name)), fc.constantFrom(...reservedMemberNames));

// ---- checks -------------------------------------------------------------------------------------

/** Percent-encodes one path segment or query value, lone surrogates as their (invalid) WTF-8 bytes. */
function encodeHostile(text: string): string {
  let out = '';
  for (const char of text) {
    const codePoint = char.codePointAt(0)!;
    if (codePoint >= 0xd800 && codePoint <= 0xdfff) {
      out += [0xe0 | (codePoint >> 12), 0x80 | ((codePoint >> 6) & 0x3f), 0x80 | (codePoint & 0x3f)]
        .map((byte) => `%${byte.toString(16).toUpperCase()}`)
        .join('');
    } else {
      out += encodeURIComponent(char).replaceAll('.', '%2E');
    }
  }
  return out;
}

async function timed(request: () => Promise<TestResponse>): Promise<TestResponse> {
  const startedAtMs = performance.now();
  const response = await request();
  refusalTimesMs.push(performance.now() - startedAtMs);
  return response;
}

/** Refusals of the router itself (undecodable path, overlong segment) name the path. */
const pathField = 'path';

/** A 4xx problem document; a 400 validation error names one of `fields` (or the path itself). */
function expectRefusal(response: TestResponse, fields: string[], label: string, allowed: number[] = [400]): void {
  const context = `${label}: ${response.status} ${response.text.slice(0, 400)}`;
  expect(response.status, context).toBeLessThan(500);
  expect(allowed, context).toContain(response.status);
  expect(response.headers.get('content-type'), context).toMatch(/^application\/problem\+json/);
  if (response.status === 400 && response.body.type === 'validation_error') {
    const named = (response.body.errors as Array<{ field: string }>).map((e) => e.field);
    expect(named.some((f) => f === pathField || fields.some((expected) => f === expected || f.startsWith(`${expected}.`))), context).toBe(true);
  } else if (response.status === 400) {
    expect(response.body.type, context).toBe('bad_request');
  }
}

interface LedgerSnapshot {
  balances: Array<[number, number]>;
  counts: LedgerCounts;
  workflows: string[];
}

async function snapshot(): Promise<LedgerSnapshot> {
  const workflows: string[] = [];
  for (const prefix of [`charge/${tenant}/`, `refund/${tenant}/`]) {
    for await (const execution of h.temporal.workflow.list({ query: `WorkflowId STARTS_WITH '${prefix}'` })) workflows.push(execution.workflowId);
  }
  const balances: Array<[number, number]> = [];
  for (const id of ['payer', 'payee']) {
    const account = await balanceOf(h.pool, tenant, id);
    balances.push([account.postedMinor, account.pendingMinor]);
  }
  return {
    balances,
    // Charges, refunds, transfers and journal entries, each by kind or status.
    counts: await countLedger(h.pool, tenant),
    workflows: workflows.sort(),
  };
}

/** Runs a property, then checks that it left the ledger and Temporal as it found them. */
async function leavesNothingBehind(property: fc.IAsyncProperty<any>): Promise<void> {
  const before = await snapshot();
  await fc.assert(property, { numRuns });
  expect(await snapshot()).toEqual(before);
}

// ---- properties ---------------------------------------------------------------------------------

describe('hostile input on the HTTP API: never a 5xx, a 4xx naming the field, nothing started or recorded', () => {
  it('POST /v1/charges: a hostile value in any body field', async () => {
    await leavesNothingBehind(
      fc.asyncProperty(hostileChargeBody, async ({ field, body }) => {
        const key = newKey('hostile-body');
        const response = await timed(() => api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': key } }));
        expectRefusal(response, [field], `${field}=${JSON.stringify(body[field])?.slice(0, 80)}`);
        expect(await workflowExists(h, `charge/${tenant}/${key}`)).toBe(false);
      }),
    );
  });

  it('POST /v1/charges: unknown body fields, hostile Idempotency-Key headers, non-object bodies', async () => {
    await leavesNothingBehind(
      fc.asyncProperty(
        fc.oneof(
          unknownMemberName.map((name) => ({ kind: 'unknown field', field: name, body: { ...chargeBody(), [name]: 1 } as unknown, key: newKey() })),
          hostileKeyHeader.map((key) => ({ kind: 'header', field: 'Idempotency-Key', body: chargeBody() as unknown, key })),
          fc.constantFrom(null, [], 'text', 5, true).map((body) => ({ kind: 'not an object', field: 'body', body, key: newKey() })),
        ),
        async ({ kind, field, body, key }) => {
          const response = await timed(() => api.request('/v1/charges', { apiKey, rawBody: JSON.stringify(body), headers: { 'idempotency-key': key } }));
          expectRefusal(response, [field], `${kind} ${JSON.stringify(field)}`);
        },
      ),
    );
  });

  it('charge routes with hostile keys in the path: GET, cancel, capture, refunds', async () => {
    const routes: Array<(k: string) => { method: string; path: string; body?: unknown; headers?: Record<string, string> }> = [
      (k: string) => ({ method: 'GET', path: `/v1/charges/${k}` }),
      (k: string) => ({ method: 'POST', path: `/v1/charges/${k}/cancel`, body: {} }),
      (k: string) => ({ method: 'POST', path: `/v1/charges/${k}/capture`, body: {} }),
      (k: string) => ({ method: 'POST', path: `/v1/charges/${k}/refunds`, body: {}, headers: { 'idempotency-key': newKey() } }),
      (k: string) => ({ method: 'GET', path: `/v1/charges/${k}/refunds` }),
      (k: string) => ({ method: 'GET', path: `/v1/charges/${encodeURIComponent(succeededKey)}/refunds/${k}` }),
    ];
    await leavesNothingBehind(
      fc.asyncProperty(
        fc.integer({ min: 0, max: routes.length - 1 }),
        fc.oneof(hostileKey, fc.string({ unit: 'binary', maxLength: 20 }), fc.constantFrom('%', '/', 'a/b', '%00', '%2F', '..', '.', '%zz')),
        async (route, key) => {
          const { method, path, body, headers } = routes[route]!(encodeHostile(key));
          const response = await timed(() => api.request(path, { apiKey, method, ...(body ? { body } : {}), ...(headers ? { headers } : {}) }));
          // A well-formed key that names no charge is a 404. URL syntax removes "." and ".." segments
          // (encoded or not) before the request leaves the client, so those land on another path: 404 or 405,
          // or, for GET /v1/charges/../refunds, the list GET /v1/refunds: the tenant's own refunds, a 200 list.
          if (method === 'GET' && new URL(path, 'http://127.0.0.1').pathname === '/v1/refunds') {
            expect(response.status, `${method} ${path}: ${response.text}`).toBe(200);
            expect(response.body).toMatchObject({ object: 'list', url: '/v1/refunds' });
            return;
          }
          expectRefusal(response, ['key', 'refundKey'], `${method} ${path}`, [400, 404, 405]);
        },
      ),
    );
  });

  it('cancel, capture and refund bodies: hostile amounts and fields against real charges change nothing', async () => {
    await leavesNothingBehind(
      fc.asyncProperty(
        fc.oneof(
          hostileAmount.map((amount) => ({ path: `/v1/charges/${reservedKey}/capture`, body: { amount } as unknown, field: 'amount', key: undefined })),
          hostileAmount.map((amount) => ({ path: `/v1/charges/${succeededKey}/refunds`, body: { amount } as unknown, field: 'amount', key: newKey('r') })),
          unknownMemberName.map((name) => ({ path: `/v1/charges/${reservedKey}/cancel`, body: { [name]: 1 } as unknown, field: name, key: undefined })),
          unknownMemberName.map((name) => ({ path: `/v1/charges/${reservedKey}/capture`, body: { amount: 1, [name]: 1 } as unknown, field: name, key: undefined })),
          unknownMemberName.map((name) => ({ path: `/v1/charges/${succeededKey}/refunds`, body: { [name]: 1 } as unknown, field: name, key: newKey('r') })),
          fc.constantFrom('cancel', 'capture').map((op) => ({ path: `/v1/charges/${reservedKey}/${op}`, body: [] as unknown, field: 'body', key: undefined })),
          hostileKeyHeader.map((key) => ({ path: `/v1/charges/${succeededKey}/refunds`, body: {} as unknown, field: 'Idempotency-Key', key })),
        ),
        async ({ path, body, field, key }) => {
          const response = await timed(() =>
            api.request(path, { apiKey, rawBody: JSON.stringify(body), headers: key === undefined ? {} : { 'idempotency-key': key } }),
          );
          expectRefusal(response, [field], `${path} ${JSON.stringify(body)}`);
        },
      ),
    );
    const reserved = await api.request(`/v1/charges/${reservedKey}`, { apiKey });
    expect(reserved.body).toMatchObject({ status: 'reserved', amount_captured: 0 });
    const succeeded = await api.request(`/v1/charges/${succeededKey}`, { apiKey });
    expect(succeeded.body).toMatchObject({ status: 'succeeded', amount_refunded: 0 });
  });

  it('accounts and deposits: hostile ids in paths, hostile bodies and keys', async () => {
    await leavesNothingBehind(
      fc.asyncProperty(
        fc.oneof(
          hostileAccountId.map((id) => ({ method: 'GET', path: `/v1/accounts/${encodeHostile(id)}`, body: undefined as unknown, field: 'id', key: undefined as string | undefined })),
          hostileAccountId.map((id) => ({ method: 'POST', path: `/v1/accounts/${encodeHostile(id)}/deposits`, body: { amount: 1 } as unknown, field: 'id', key: newKey() })),
          hostileAmount.map((amount) => ({ method: 'POST', path: '/v1/accounts/payer/deposits', body: { amount } as unknown, field: 'amount', key: newKey() })),
          hostileKey.filter((k) => k !== '').map((externalId) => ({ method: 'POST', path: '/v1/accounts/payer/deposits', body: { amount: 1, external_id: externalId } as unknown, field: 'external_id', key: undefined })),
          hostileKeyHeader.map((key) => ({ method: 'POST', path: '/v1/accounts/payer/deposits', body: { amount: 1 } as unknown, field: 'Idempotency-Key', key })),
          unknownMemberName.map((name) => ({ method: 'POST', path: '/v1/accounts/payer/deposits', body: { amount: 1, [name]: 1 } as unknown, field: name, key: newKey() })),
          hostileAccountId.map((id) => ({ method: 'POST', path: '/v1/accounts', body: { currency: 'USD', id } as unknown, field: 'id', key: newKey() })),
          fc.oneof(hostileLine(3), fc.constantFrom('usd', 'XYZ', null)).map((currency) => ({ method: 'POST', path: '/v1/accounts', body: { currency } as unknown, field: 'currency', key: newKey() })),
          fc.constantFrom(null, 'true', 1, 0, []).map((flag) => ({ method: 'POST', path: '/v1/accounts', body: { currency: 'USD', allow_overdraft: flag } as unknown, field: 'allow_overdraft', key: newKey() })),
          unknownMemberName.map((name) => ({ method: 'POST', path: '/v1/accounts', body: { currency: 'USD', [name]: 1 } as unknown, field: name, key: newKey() })),
        ),
        async ({ method, path, body, field, key }) => {
          const response = await timed(() =>
            api.request(path, {
              apiKey: adminKey,
              method,
              ...(body === undefined ? {} : { rawBody: JSON.stringify(body) }),
              headers: key === undefined ? {} : { 'idempotency-key': key },
            }),
          );
          // An id that is well formed but unknown is a 404; "." and ".." segments leave the route.
          expectRefusal(response, [field], `${method} ${path} ${JSON.stringify(body)}`, [400, 404]);
        },
      ),
    );
    const accounts = await h.pool.query('SELECT id FROM accounts WHERE tenant = $1 AND NOT is_system ORDER BY id', [tenant]);
    expect(accounts.rows.map((r) => r.id)).toEqual(['payee', 'payer']);
  });

  it('GET /v1/charges: hostile query parameters', async () => {
    const names = ['order_id', 'payer_account_id', 'status', 'limit', 'starting_after'] as const;
    const hostileValue: Record<(typeof names)[number], fc.Arbitrary<string>> = {
      order_id: fc.oneof(hostileLine(255), fc.constant('')),
      payer_account_id: hostileAccountId,
      status: fc.oneof(hostileLine(20), fc.constantFrom('SUCCEEDED', 'paid', '')),
      limit: fc.oneof(fc.constantFrom('0', '101', '1e2', '-1', '1.5', 'NaN', '', ' 5', '0x10', '٣'), fc.integer({ min: 101 }).map(String)),
      starting_after: hostileKey,
    };
    await leavesNothingBehind(
      fc.asyncProperty(
        fc.oneof(
          fc.constantFrom(...names).chain((name) => hostileValue[name].map((value) => ({ query: `${name}=${encodeHostile(value)}`, field: name as string }))),
          fc.constantFrom(...names).map((name) => ({ query: `${name}=a&${name}=b`, field: name as string })),
          unknownFieldName.map((name) => ({ query: `${encodeHostile(name)}=1`, field: name })),
        ),
        async ({ query, field }) => {
          const response = await timed(() => api.request(`/v1/charges?${query}`, { apiKey }));
          expectRefusal(response, [field], query);
        },
      ),
    );
  });

  it('valid text, however exotic, is stored exactly as sent', async () => {
    // An independent statement of the rule: no \p{Cc} (description: but tab and line breaks), well formed, lengths in characters.
    const valid = (text: string, maxLength: number, multiLine = false) =>
      [...text].length <= maxLength && !/\p{Cs}/u.test(text) && ![...text].some((c) => /\p{Cc}/u.test(c) && !(multiLine && ['\t', '\n', '\r'].includes(c)));
    const text = (maxLength: number, multiLine = false) =>
      fc
        .string({ unit: fc.oneof(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }), fc.constantFrom('\t', '\n', '\r', '%', '/', '\\', '"', '\u200d', '\ufeff', '\u{10ffff}')), maxLength })
        .filter((s) => valid(s, maxLength, multiLine));
    await fc.assert(
      fc.asyncProperty(
        text(255).filter((s) => s.length > 0),
        text(1_000, true),
        fc.dictionary(text(40).filter((s) => s.length > 0 && !reservedMemberNames.has(s)), text(500), { maxKeys: 5 }),
        async (orderId, description, metadata) => {
          const key = newKey('exotic');
          const body = chargeBody({ amount: 1, order_id: orderId, description, metadata });
          const created = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': key } });
          expect(created.status, created.text).toBe(201);
          const read = await api.request(`/v1/charges/${key}`, { apiKey });
          expect(read.body).toMatchObject({ order_id: orderId, description, metadata });
          const stored = (await readCharge(h.pool, tenant, key))?.charge;
          expect({ order_id: stored?.orderId, description: stored?.description, metadata: stored?.metadata }).toEqual({ order_id: orderId, description, metadata });
          const replay = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': key } });
          expect(replay.status).toBe(200);
        },
      ),
      { numRuns: 15 },
    );
    await expectLedgerInvariants(h.pool, tenant);
  });
});

describe('hostile input on the MCP tools: a tool error naming the argument, nothing started or recorded', () => {
  /**
   * Our own structured error names the field; the SDK's schema check names it in its text. A value
   * the strict JSON decoder refuses (a number that is not a safe integer literal, a prototype name)
   * never reaches a tool: the endpoint answers HTTP 400 with a JSON-RPC error naming
   * `params.arguments.<field>`, which the SDK client throws.
   */
  async function expectToolRefusal(call: Promise<Awaited<ReturnType<typeof callTool>>>, fields: string[], label: string): Promise<void> {
    let result: Awaited<ReturnType<typeof callTool>>;
    try {
      result = await call;
    } catch (error) {
      const context = `${label}: ${String(error).slice(0, 400)}`;
      expect((error as { code?: unknown }).code, context).toBe(400);
      expect(String(error), context).toMatch(/"code":-32600/);
      expect(fields.some((field) => String(error).includes(`"field":"params.arguments.${field}`)), context).toBe(true);
      return;
    }
    const text = (result.content[0] as { text: string } | undefined)?.text ?? '';
    const context = `${label}: ${text.slice(0, 300)}`;
    expect(result.isError, context).toBe(true);
    const structured = (result.structuredContent as { error?: { type: string; errors?: Array<{ field: string }> } } | undefined)?.error;
    if (structured) {
      expect(structured.type, context).toBe('validation_error');
      const named = (structured.errors ?? []).map((e) => e.field);
      expect(named.some((f) => f === pathField || fields.some((expected) => f === expected || f.startsWith(`${expected}.`))), context).toBe(true);
    } else {
      expect(text, context).toMatch(/validation error/i);
      expect(fields.some((field) => text.includes(field)), context).toBe(true);
    }
  }

  it('every tool, every argument', async () => {
    const validCharge = () => ({ idempotency_key: newKey('mcp-hostile'), ...chargeBody({ amount: 100 }) });
    await leavesNothingBehind(
      fc.asyncProperty(
        fc.oneof(
          hostileChargeBody.map(({ field, body }) => ({ tool: 'create_charge', args: { idempotency_key: newKey('mcp-hostile'), ...body }, fields: [field] })),
          hostileKey.map((key) => ({ tool: 'create_charge', args: { ...validCharge(), idempotency_key: key }, fields: ['idempotency_key'] })),
          unknownArgumentName.map((name) => ({ tool: 'create_charge', args: { ...validCharge(), [name]: 'x' }, fields: [name] })),
          hostileKey.map((key) => ({ tool: 'get_charge', args: { idempotency_key: key }, fields: ['idempotency_key'] })),
          hostileKey.map((key) => ({ tool: 'cancel_charge', args: { idempotency_key: key }, fields: ['idempotency_key'] })),
          unknownArgumentName.map((name) => ({ tool: 'cancel_charge', args: { idempotency_key: reservedKey, [name]: 1 }, fields: [name] })),
          hostileAmount.map((amount) => ({ tool: 'capture_charge', args: { idempotency_key: reservedKey, amount }, fields: ['amount'] })),
          hostileKey.map((key) => ({ tool: 'capture_charge', args: { idempotency_key: key }, fields: ['idempotency_key'] })),
          hostileAmount.map((amount) => ({
            tool: 'refund_charge',
            args: { idempotency_key: succeededKey, refund_idempotency_key: newKey('mcp-r'), amount },
            fields: ['amount'],
          })),
          hostileKey.map((key) => ({ tool: 'refund_charge', args: { idempotency_key: succeededKey, refund_idempotency_key: key }, fields: ['refund_idempotency_key'] })),
          hostileKey.map((key) => ({ tool: 'refund_charge', args: { idempotency_key: key, refund_idempotency_key: newKey('mcp-r') }, fields: ['idempotency_key'] })),
          hostileAccountId.map((id) => ({ tool: 'get_account_balance', args: { account_id: id }, fields: ['account_id'] })),
        ),
        async ({ tool, args, fields }: { tool: string; args: Record<string, unknown>; fields: string[] }) => {
          const startedAtMs = performance.now();
          await expectToolRefusal(callTool(mcp, tool, args), fields, `${tool} ${JSON.stringify(args).slice(0, 200)}`);
          refusalTimesMs.push(performance.now() - startedAtMs);
          if (tool === 'create_charge' && typeof args.idempotency_key === 'string' && /^[!-~]{1,255}$/.test(args.idempotency_key)) {
            expect(await workflowExists(h, `charge/${tenant}/${args.idempotency_key}`)).toBe(false);
          }
        },
      ),
    );
    const reserved = await api.request(`/v1/charges/${reservedKey}`, { apiKey });
    expect(reserved.body).toMatchObject({ status: 'reserved', amount_captured: 0 });
  });
});

describe('hostile command-line flags: exit 2 naming the flag, before anything connects', () => {
  const cli = (args: string[]) => runCli([...args, '--json']);

  it('charge, accounts, refund and api-keys with control characters, bad ids and bad numbers', { timeout: 180_000 }, async () => {
    const key = newKey('cli-hostile');
    const charge = ['charge', '--tenant', tenant, '--payer', 'payer', '--payee', 'payee', '--amount', '100', '--currency', 'USD'];
    const cases: Array<[string[], string]> = [
      [[...charge, '--key', key, '--order', 'bell\u0007'], 'order_id'],
      [[...charge, '--key', newKey(), '--order', 'o', '--wait-ms', 'soon'], '--wait-ms'],
      [['accounts', 'show', 'a/b', '--tenant', tenant], '<account-id>'],
      [['refund', succeededKey, '--tenant', tenant, '--refund-key', 'r\u0085'], '--refund-key'],
      [['api-keys', 'create', '--tenant', tenant, '--label', 'label\u0007'], '--label'],
      [['status', 'k', '--tenant', 'Not A Tenant'], 'tenant'],
    ];
    const before = await snapshot();
    const results = await Promise.all(cases.map(([args]) => cli(args)));
    results.forEach((result, i) => {
      const [args, field] = cases[i]!;
      const context = `${args.join(' ')}: ${result.code} ${JSON.stringify(result.json)} ${result.stderr.slice(0, 300)}`;
      expect(result.code, context).toBe(2);
      expect(result.json?.error?.type, context).toBe('validation_error');
      expect((result.json.error.errors as Array<{ field: string }>).map((e) => e.field), context).toContain(field);
    });
    expect(await workflowExists(h, `charge/${tenant}/${key}`)).toBe(false);
    expect(await snapshot()).toEqual(before);
    const keys = await listApiKeys(h.pool, tenant);
    expect(keys.map((k) => k.label)).not.toContain('label\u0007');
  });
});
