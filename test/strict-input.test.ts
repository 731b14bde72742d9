import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { webhookSignatureHeaderValue } from '../src/domain/webhook-signature.js';
import { readCharge } from '../src/ledger/charges.js';
import { countLedger } from '../src/ledger/reports.js';
import { addWebhookSecret } from '../src/service/webhooks.js';
import { jsonMaxDepth } from '../src/support/strict-json.js';
import { fundedApiTenant, useApi } from './support/api.js';
import { balanceOf, expectLedgerInvariants, newKey, testPayloadSettings, useHarness, workflowExists } from './support/harness.js';
import { callTool, mcpOverHttp } from './support/mcp.js';

/**
 * Request bodies are taken exactly as written or refused (docs/api.md, How request bodies are
 * read): over HTTP, over the MCP endpoint and on provider webhooks, bytes that are not UTF-8,
 * numbers that are not safe integer literals, duplicate and prototype-named members, and a second
 * Host header are each a 400 naming the field, and nothing is recorded or started.
 */

const h = useHarness();
const api = useApi();

type Part = string | number[];
/** A body's bytes: text as UTF-8, arrays as the raw bytes they hold (which may be no UTF-8 at all). */
const bytesOf = (...parts: Part[]): Buffer => Buffer.concat(parts.map((part) => (typeof part === 'string' ? Buffer.from(part, 'utf8') : Buffer.from(part))));

interface RawResponse {
  status: number;
  contentType: string | null;
  body: any;
  text: string;
}

async function post(path: string, body: Uint8Array, headers: Record<string, string>): Promise<RawResponse> {
  const response = await fetch(`${api.baseUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  const text = await response.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: response.status, contentType: response.headers.get('content-type'), body: parsed, text };
}

/** The byte sequences the probe found decoded to U+FFFD and stored, and a leading byte order mark. */
const notUtf8: Array<[label: string, bytes: number[]]> = [
  ['an encoded surrogate (ED A0 80)', [0xed, 0xa0, 0x80]],
  ['an invalid byte (FF)', [0xff]],
  ['an overlong "/" (C0 AF)', [0xc0, 0xaf]],
];

/** Amounts as written; JSON.parse would read each as a double and a schema would see 101, 1, 10^12, 100, 100, 0. */
const notIntegerLiterals: Array<[literal: string, problem: RegExp]> = [
  ['100.99999999999999999', /without a fraction or exponent \(received 100\.99999999999999999\)/],
  ['0.99999999999999999999', /without a fraction/],
  ['999999999999.99999', /without a fraction/],
  ['100.0', /without a fraction/],
  ['1e2', /or exponent \(received 1e2\)/],
  ['-0', /is -0/],
  ['9007199254740993', /safe integer range/],
];

/** Members refused by name, at the top level and inside metadata, as the caller would see the field named. */
const prototypeNamed: Array<[members: string, field: string]> = [
  ['"__proto__": {"amount": 1}', '__proto__'],
  ['"constructor": {"name": "x"}', 'constructor'],
  ['"prototype": 1', 'prototype'],
  ['"metadata": {"__proto__": "x"}', 'metadata.__proto__'],
  ['"metadata": {"constructor": "x"}', 'metadata.constructor'],
  ['"metadata": {"prototype": "x"}', 'metadata.prototype'],
];

const deepMetadata = `"metadata": ${'{"k":'.repeat(jsonMaxDepth)}"v"${'}'.repeat(jsonMaxDepth)}`;

/** A create-charge body with `extra` members after the usual ones; `amount` is written as given. */
function chargeJson(options: { amount?: string; order?: Part[]; extra?: string } = {}): Part[] {
  const order = options.order ?? [`o-${randomBytes(4).toString('hex')}`];
  return [
    '{"order_id": "',
    ...order,
    `", "payer_account_id": "payer", "payee_account_id": "payee", "amount": ${options.amount ?? '100'}, "currency": "USD"`,
    options.extra ? `, ${options.extra}` : '',
    '}',
  ];
}

/** Every charge attempt of the tenant was refused: no charge row, no transfer but the opening deposit. */
async function nothingWritten(tenant: string, keys: string[]): Promise<void> {
  const counts = await countLedger(h.pool, tenant);
  expect(counts.charges).toBe(0);
  expect(Object.keys(counts.transfersByKind).filter((kind) => kind !== 'deposit')).toEqual([]);
  expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 10_000, pendingMinor: 0 });
  for (const key of keys) {
    expect(await readCharge(h.pool, tenant, key), key).toBeNull();
    expect(await workflowExists(h, `charge/${tenant}/${key}`), key).toBe(false);
  }
  await expectLedgerInvariants(h.pool, tenant);
}

describe('HTTP: POST /v1/charges takes the body exactly as written or refuses it', () => {
  async function createCharge(apiKey: string, key: string, body: Buffer): Promise<RawResponse> {
    return post('/v1/charges', body, { authorization: `Bearer ${apiKey}`, 'idempotency-key': key });
  }

  /** A 400 problem document whose `errors` name `field` with a message matching `problem`. */
  function expectRefused(response: RawResponse, type: string, field: string, problem: RegExp, label: string): void {
    const context = `${label}: ${response.status} ${response.text.slice(0, 400)}`;
    expect(response.status, context).toBe(400);
    expect(response.contentType, context).toMatch(/^application\/problem\+json/);
    expect(response.body.type, context).toBe(type);
    expect(response.body.errors, context).toEqual([{ field, message: expect.stringMatching(problem) }]);
  }

  it('bytes that are not UTF-8, or a byte order mark: 400 malformed_json naming body', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'strict-utf8' });
    const keys: string[] = [];
    for (const [label, bytes] of notUtf8) {
      for (const at of ['order_id', 'metadata key'] as const) {
        const key = newKey('utf8');
        keys.push(key);
        const body = at === 'order_id' ? bytesOf(...chargeJson({ order: ['o-', bytes, '-x'] })) : bytesOf(...chargeJson({ extra: '"metadata": {"k' }), bytes, '": "v"}}');
        expectRefused(await createCharge(apiKey, key, body), 'malformed_json', 'body', /is not valid UTF-8/, `${label} in ${at}`);
      }
    }
    const key = newKey('bom');
    keys.push(key);
    expectRefused(await createCharge(apiKey, key, bytesOf([0xef, 0xbb, 0xbf], ...chargeJson())), 'malformed_json', 'body', /byte order mark/, 'BOM');
    await nothingWritten(tenant, keys);
  });

  it('a body that differs from the first only in such bytes is refused, never replayed as the first (the probe had 200)', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'strict-replay' });
    const key = newKey('replay');
    // U+FFFD sent as the valid UTF-8 it is: what a lenient decoder would have made of the bytes below.
    const first = await createCharge(apiKey, key, bytesOf(...chargeJson({ order: ['order-\ufffd'] })));
    expect(first.status, first.text).toBe(201);
    for (const [label, bytes] of notUtf8) {
      const again = await createCharge(apiKey, key, bytesOf(...chargeJson({ order: ['order-', bytes] })));
      expectRefused(again, 'malformed_json', 'body', /is not valid UTF-8/, label);
    }
    const replay = await createCharge(apiKey, key, bytesOf(...chargeJson({ order: ['order-\ufffd'] })));
    expect(replay.status, replay.text).toBe(200);
    expect((await readCharge(h.pool, tenant, key))?.charge.orderId).toBe('order-\ufffd');
    expect((await countLedger(h.pool, tenant)).charges).toBe(1);
  });

  it('amounts not written as a safe integer literal: 400 naming amount, never rounded and charged', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'strict-amount' });
    const keys: string[] = [];
    for (const [literal, problem] of notIntegerLiterals) {
      const key = newKey('amount');
      keys.push(key);
      expectRefused(await createCharge(apiKey, key, bytesOf(...chargeJson({ amount: literal }))), 'validation_error', 'amount', problem, literal);
    }
    await nothingWritten(tenant, keys);
  });

  it('__proto__, constructor and prototype members, at the top level and in metadata: 400 naming them', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'strict-proto' });
    const keys: string[] = [];
    for (const [members, field] of prototypeNamed) {
      const key = newKey('proto');
      keys.push(key);
      const name = field.split('.').at(-1)!;
      expectRefused(
        await createCharge(apiKey, key, bytesOf(...chargeJson({ extra: members }))),
        'validation_error',
        field,
        new RegExp(`not a known field: "${name}"`),
        members,
      );
    }
    await nothingWritten(tenant, keys);
  });

  it('a member given twice (amount, a metadata key) and nesting deeper than jsonMaxDepth: 400, nothing written', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'strict-dup' });
    const cases: Array<[label: string, body: Buffer, type: string, field: string, problem: RegExp]> = [
      // The probe's case: the last amount would have won.
      ['duplicate amount', bytesOf(...chargeJson({ amount: '100', extra: '"amount": 9000' })), 'validation_error', 'amount', /more than once/],
      ['duplicate metadata key', bytesOf(...chargeJson({ extra: '"metadata": {"k": "a", "k": "b"}' })), 'validation_error', 'metadata.k', /more than once/],
      ['too deep', bytesOf(...chargeJson({ extra: deepMetadata })), 'malformed_json', 'body', /deeper than 32 levels \(jsonMaxDepth\)/],
    ];
    const keys: string[] = [];
    for (const [label, body, type, field, problem] of cases) {
      const key = newKey('dup');
      keys.push(key);
      expectRefused(await createCharge(apiKey, key, body), type, field, problem, label);
    }
    await nothingWritten(tenant, keys);
  });

  it('the same rules hold on every route: a capture with a fractional or duplicate amount moves nothing', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'strict-capture' });
    const key = newKey('manual');
    const reserved = await createCharge(apiKey, key, bytesOf('{"order_id": "o", "payer_account_id": "payer", "payee_account_id": "payee", "amount": 500, "currency": "USD", "capture": "manual"}'));
    expect(reserved.body?.status, reserved.text).toBe('reserved');
    for (const [body, problem] of [['{"amount": 100.0}', /without a fraction/], ['{"amount": 100, "amount": 500}', /more than once/]] as const) {
      const response = await post(`/v1/charges/${key}/capture`, bytesOf(body), { authorization: `Bearer ${apiKey}` });
      expectRefused(response, 'validation_error', 'amount', problem, body);
    }
    expect((await readCharge(h.pool, tenant, key))?.charge).toMatchObject({ status: 'reserved' });
    expect((await balanceOf(h.pool, tenant, 'payer')).pendingMinor).toBe(500);
  });
});

describe('MCP: create_charge through POST /mcp takes the body exactly as written or refuses it', () => {
  /** A tools/call create_charge JSON-RPC request whose arguments end with `extra`; `amount` as written. */
  function toolCall(key: string, options: { amount?: string; order?: Part[]; extra?: string } = {}): Buffer {
    return bytesOf(
      '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "create_charge", "arguments": ',
      ...chargeJson(options).map((part, i) => (i === 0 ? `{"idempotency_key": "${key}", "order_id": "` : part)),
      '}}',
    );
  }

  function mcpPost(apiKey: string, body: Buffer): Promise<RawResponse> {
    return post('/mcp', body, { authorization: `Bearer ${apiKey}`, accept: 'application/json, text/event-stream' });
  }

  /** HTTP 400 with a JSON-RPC error: Parse error or Invalid Request, its message and data naming the field. */
  function expectJsonRpcRefusal(response: RawResponse, code: number, field: string, problem: RegExp, label: string): void {
    const context = `${label}: ${response.status} ${response.text.slice(0, 400)}`;
    expect(response.status, context).toBe(400);
    expect(response.contentType, context).toMatch(/^application\/json/);
    expect(response.body, context).toMatchObject({ jsonrpc: '2.0', id: null, error: { code } });
    expect(response.body.error.message, context).toContain(`${field} `);
    expect(response.body.error.message, context).toMatch(problem);
    expect(response.body.error.data.errors, context).toEqual([{ field, message: expect.stringMatching(problem) }]);
  }

  it('the same envelope with valid arguments creates the charge (so the refusals below are the poison)', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'strict-mcp-ok' });
    const key = newKey('mcp-ok');
    const response = await mcpPost(apiKey, toolCall(key));
    expect(response.status, response.text).toBe(200);
    expect(response.body.result.isError ?? false, response.text).toBe(false);
    expect((await readCharge(h.pool, tenant, key))?.charge.amountMinor).toBe(100);
  });

  it('bytes that are not UTF-8, a BOM, amounts that are not safe integer literals, prototype names, duplicates: a JSON-RPC error naming the field', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'strict-mcp' });
    const args = 'params.arguments';
    const keys: string[] = [];
    const cases: Array<[label: string, body: (key: string) => Buffer, code: number, field: string, problem: RegExp]> = [
      ...notUtf8.map(([label, bytes]): [string, (key: string) => Buffer, number, string, RegExp] => [
        label,
        (key) => toolCall(key, { order: ['o-', bytes] }),
        -32700,
        'body',
        /not valid UTF-8/,
      ]),
      ['BOM', (key) => Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), toolCall(key)]), -32700, 'body', /byte order mark/],
      ...notIntegerLiterals.map(([literal, problem]): [string, (key: string) => Buffer, number, string, RegExp] => [
        literal,
        (key) => toolCall(key, { amount: literal }),
        -32600,
        `${args}.amount`,
        problem,
      ]),
      ...prototypeNamed.map(([members, field]): [string, (key: string) => Buffer, number, string, RegExp] => [
        members,
        (key) => toolCall(key, { extra: members }),
        -32600,
        `${args}.${field}`,
        /not a known field/,
      ]),
      ['duplicate amount', (key) => toolCall(key, { extra: '"amount": 9000' }), -32600, `${args}.amount`, /more than once/],
      ['duplicate in metadata', (key) => toolCall(key, { extra: '"metadata": {"k": "a", "k": "b"}' }), -32600, `${args}.metadata.k`, /more than once/],
      ['too deep', (key) => toolCall(key, { extra: deepMetadata }), -32700, 'body', /deeper than/],
    ];
    for (const [label, body, code, field, problem] of cases) {
      const key = newKey('mcp');
      keys.push(key);
      expectJsonRpcRefusal(await mcpPost(apiKey, body(key)), code, field, problem, label);
    }
    await nothingWritten(tenant, keys);
  });

  it('an SDK client sending a fractional amount gets the refusal naming the argument', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'strict-mcp-sdk' });
    const { client, transport } = mcpOverHttp(api.baseUrl, apiKey);
    await client.connect(transport);
    const key = newKey('mcp-sdk');
    try {
      await expect(
        callTool(client, 'create_charge', { idempotency_key: key, order_id: 'o', payer_account_id: 'payer', payee_account_id: 'payee', amount: 100.5, currency: 'USD' }),
      ).rejects.toMatchObject({ code: 400, message: expect.stringMatching(/"code":-32600,.*params\.arguments\.amount must be an integer/) });
    } finally {
      await client.close();
    }
    await nothingWritten(tenant, [key]);
  });
});

describe('webhooks: a signed delivery is read by the same rules', () => {
  it('bytes that are not UTF-8, duplicates, fractions and prototype names in the event: 400 naming the field, nothing credited', async () => {
    const { tenant } = await fundedApiTenant(api, { label: 'strict-webhook' });
    const provider = `strict-${randomBytes(4).toString('hex')}`;
    const { secret } = await addWebhookSecret(h.pool, provider);
    const event = (data: Part[]): Buffer =>
      bytesOf(`{"id": "${newKey('evt')}", "type": "deposit.succeeded", "data": {"tenant": "${tenant}", "account_id": "payer", `, ...data, '}}');
    const cases: Array<[label: string, body: Buffer, field: string, problem: RegExp]> = [
      ['duplicate amount_minor', event(['"amount_minor": 1, "currency": "USD", "amount_minor": 900000']), 'data.amount_minor', /more than once/],
      ['fractional amount_minor', event(['"amount_minor": 2500.0, "currency": "USD"']), 'data.amount_minor', /without a fraction/],
      ['__proto__ in data', event(['"amount_minor": 2500, "currency": "USD", "__proto__": {}']), 'data.__proto__', /not a known field/],
      ['not UTF-8', event(['"amount_minor": 2500, "currency": "US', [0xff], '"']), 'body', /not valid UTF-8/],
    ];
    const before = await balanceOf(h.pool, tenant, 'payer');
    for (const [label, body, field, problem] of cases) {
      const signature = webhookSignatureHeaderValue([secret], Math.floor(Date.now() / 1000), body);
      const response = await post(`/v1/webhooks/${provider}`, body, { 'chargeguard-signature': signature });
      const context = `${label}: ${response.status} ${response.text.slice(0, 300)}`;
      expect(response.status, context).toBe(400);
      expect(response.body.errors, context).toEqual([{ field, message: expect.stringMatching(problem) }]);
    }
    const events = await h.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM webhook_events WHERE provider = $1', [provider]);
    expect(events.rows[0]!.n).toBe(0);
    expect(await balanceOf(h.pool, tenant, 'payer')).toEqual(before);
    expect((await countLedger(h.pool, tenant)).transfersByKind).toEqual({ deposit: 1 });
  });
});

describe('the payload codec reads its bodies by the same rules', () => {
  const token = randomBytes(32).toString('base64url');
  const codecApi = useApi({ env: { ...testPayloadSettings(), CHARGEGUARD_CODEC_TOKEN: token } });

  it('a duplicate member, a prototype name, bytes that are not UTF-8: 400 naming the field', async () => {
    const payload = '{"metadata": {"encoding": "YmluYXJ5L3BsYWlu"}, "data": "AAE="}';
    const cases: Array<[label: string, body: Buffer, field: string, problem: RegExp]> = [
      ['duplicate payloads', bytesOf(`{"payloads": [], "payloads": [${payload}]}`), 'payloads', /more than once/],
      ['duplicate metadata name', bytesOf('{"payloads": [{"metadata": {"encoding": "YQ==", "encoding": "Yg=="}}]}'), 'payloads.0.metadata.encoding', /more than once/],
      ['__proto__ in a payload', bytesOf('{"payloads": [{"__proto__": {}}]}'), 'payloads.0.__proto__', /not a known field/],
      ['not UTF-8', bytesOf('{"payloads": [{"data": "', [0xc0, 0xaf], '"}]}'), 'body', /not valid UTF-8/],
    ];
    for (const [label, body, field, problem] of cases) {
      const response = await fetch(`${codecApi.baseUrl}/codec/decode`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body,
      });
      const text = await response.text();
      expect(response.status, `${label}: ${text}`).toBe(400);
      expect(JSON.parse(text).errors, `${label}: ${text}`).toEqual([{ field, message: expect.stringMatching(problem) }]);
    }
    const valid = await fetch(`${codecApi.baseUrl}/codec/decode`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: `{"payloads": [${payload}]}`,
    });
    expect(valid.status, await valid.clone().text()).toBe(200);
    expect(await valid.json()).toEqual({ payloads: [JSON.parse(payload)] });
  });
});

describe('Host: a request with two Host headers', () => {
  /** One HTTP/1.1 request written by hand: fetch cannot send a header twice. */
  function rawRequest(head: string[], body: Buffer): Promise<{ status: number; text: string }> {
    const { hostname, port } = new URL(api.baseUrl);
    return new Promise((resolve, reject) => {
      const socket = connect({ host: hostname, port: Number(port) }, () => {
        // Written without ending our side: half-closed, the connection was dropped before the slower
        // answer of a real charge arrived.
        socket.write(Buffer.concat([Buffer.from(`${[...head, `content-length: ${body.length}`, 'connection: close'].join('\r\n')}\r\n\r\n`), body]));
      });
      const chunks: Buffer[] = [];
      socket.on('data', (chunk: Buffer) => chunks.push(chunk));
      socket.on('error', reject);
      socket.on('close', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0), text });
      });
    });
  }

  it('is a 400 naming Host, before authentication and before anything is started', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'strict-host' });
    const key = newKey('host');
    const { host } = new URL(api.baseUrl);
    const body = bytesOf(...chargeJson());
    const head = (hosts: string[], auth: string | null) => [
      'POST /v1/charges HTTP/1.1',
      ...hosts.map((value) => `Host: ${value}`),
      ...(auth ? [`Authorization: Bearer ${auth}`] : []),
      'Content-Type: application/json',
      `Idempotency-Key: ${key}`,
    ];
    for (const [hosts, auth] of [[[host, 'elsewhere.example'], apiKey], [[host, host], apiKey], [[host, 'elsewhere.example'], null]] as const) {
      const response = await rawRequest(head([...hosts], auth), body);
      expect(response.status, response.text).toBe(400);
      expect(response.text).toMatch(/^content-type: application\/problem\+json/im);
      expect(response.text).toContain('"errors":[{"field":"Host","message":"appears 2 times');
    }
    await nothingWritten(tenant, [key]);
    // One Host: the same request goes through, so the refusal above was the second header.
    const once = await rawRequest(head([host], apiKey), body);
    expect(once.status, once.text).toBe(201);
  });
});
