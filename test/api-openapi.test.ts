import { Ajv2020 } from 'ajv/dist/2020.js';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseSignatureHeader, webhookSignatureHeaderValue } from '../src/domain/webhook-signature.js';
import { fundedApiTenant, useApi } from './support/api.js';
import { testPayloadSettings } from './support/harness.js';

const api = useApi();
// The payload codec's routes exist only when configured: an API serving them, for the document's sake.
const withCodec = useApi({ env: { ...testPayloadSettings(), CHARGEGUARD_CODEC_TOKEN: 'c'.repeat(48) } });
let document: any;
beforeAll(async () => {
  const response = await api.request('/openapi.json');
  expect(response.status).toBe(200);
  document = response.body;
});

/** The routes of docs/contract.md, Surfaces (and the listing routes beside them), as OpenAPI paths. */
const contractRoutes: Array<[string, string]> = [
  ['post', '/v1/charges'],
  ['get', '/v1/charges/{key}'],
  ['post', '/v1/charges/{key}/cancel'],
  ['post', '/v1/charges/{key}/capture'],
  ['post', '/v1/charges/{key}/refunds'],
  ['get', '/v1/charges'],
  ['get', '/v1/charges/{key}/refunds'],
  ['get', '/v1/charges/{key}/refunds/{refundKey}'],
  ['post', '/v1/accounts'],
  ['get', '/v1/accounts'],
  ['get', '/v1/accounts/{id}'],
  ['post', '/v1/accounts/{id}/deposits'],
  ['get', '/v1/events'],
  ['get', '/v1/events/{id}'],
  ['get', '/healthz'],
  ['get', '/readyz'],
  ['get', '/metrics'],
];

function refsIn(value: unknown, found: string[] = []): string[] {
  if (Array.isArray(value)) value.forEach((v) => refsIn(v, found));
  else if (value && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (k === '$ref' && typeof v === 'string') found.push(v);
      else refsIn(v, found);
    }
  }
  return found;
}

describe('the OpenAPI document', () => {
  it('is OpenAPI 3.1 with valid JSON Schema 2020-12 components and no dangling $ref', () => {
    expect(document.openapi).toBe('3.1.0');
    expect(document.info).toMatchObject({ title: 'chargeguard' });
    expect(document.components.securitySchemes.apiKey).toMatchObject({ type: 'http', scheme: 'bearer' });
    const ajv = new Ajv2020({ strict: false, validateFormats: false });
    for (const [name, schema] of Object.entries(document.components.schemas)) {
      expect(() => ajv.compile(schema as object), name).not.toThrow();
    }
    for (const ref of refsIn(document)) {
      expect(ref).toMatch(/^#\/components\/schemas\//);
      expect(document.components.schemas[ref.split('/').pop()!], ref).toBeDefined();
    }
    // Every operation answers something, and every problem response is problem+json.
    for (const [path, operations] of Object.entries<any>(document.paths)) {
      for (const [method, operation] of Object.entries<any>(operations)) {
        expect(Object.keys(operation.responses ?? {}).length, `${method} ${path}`).toBeGreaterThan(0);
        for (const [code, response] of Object.entries<any>(operation.responses)) {
          // /mcp's own answers are the MCP transport's JSON-RPC errors; the API's hooks before it answer problems.
          const jsonRpc = path === '/mcp' && response.content?.['application/json'];
          if (Number(code) >= 400 && response.content && !jsonRpc) {
            expect(Object.keys(response.content), `${method} ${path} ${code}`).toEqual(['application/problem+json']);
          }
        }
      }
    }
  });

  it('lists every route of the contract, each served by the app', () => {
    for (const [method, path] of contractRoutes) {
      expect(document.paths[path]?.[method], `${method.toUpperCase()} ${path} in the document`).toBeDefined();
      const url = path.replace(/\{(\w+)\}/g, ':$1');
      expect(api.app.hasRoute({ method: method.toUpperCase() as 'GET', url }), `${method.toUpperCase()} ${path} served`).toBe(true);
    }
    const create = document.paths['/v1/charges'].post;
    expect(Object.keys(create.responses).sort()).toEqual(['200', '201', '202', '400', '401', '403', '413', '415', '422', '429', '503']);
    // Only the routes that create money answer 403 (an agent key); charging is every role's.
    for (const [path, method] of [['/v1/accounts', 'post'], ['/v1/accounts/{id}/deposits', 'post']] as const) {
      expect(document.paths[path][method].responses, `${method} ${path}`).toHaveProperty('403');
    }
    expect(create.parameters).toContainEqual(expect.objectContaining({ in: 'header', name: 'idempotency-key', required: false }));
    expect(create.requestBody.content['application/json'].schema).toEqual({ $ref: '#/components/schemas/CreateChargeRequest' });
    const request = document.components.schemas.CreateChargeRequest;
    expect(request.required).toEqual(expect.arrayContaining(['order_id', 'payee_account_id', 'amount', 'currency']));
    expect(request.properties.amount).toMatchObject({ type: 'integer', minimum: 1 });
  });

  it('describes who pays: exactly one of payer_account_id and payment_method, provider only with payment_method, as the program judges', async () => {
    const request = document.components.schemas.CreateChargeRequest;
    expect(request.properties.payment_method).toMatchObject({ type: 'string', minLength: 1, maxLength: 255 });
    expect(request.properties.provider).toMatchObject({ enum: ['stripe'] });
    expect(request.description).toMatch(/Exactly one of payer_account_id .* and payment_method/);
    const valid = new Ajv2020({ strict: false, validateFormats: false }).compile(request);
    const apiKey = await api.keyFor(`t-openapi-payer-${Date.now().toString(36)}`);
    const base = { order_id: 'o-1', payee_account_id: 'payee', amount: 100, currency: 'USD' };
    const refused: Array<[string, Record<string, unknown>]> = [
      ['neither', base],
      ['both', { ...base, payer_account_id: 'payer', payment_method: 'pm_card_visa' }],
      ['provider without payment_method', { ...base, payer_account_id: 'payer', provider: 'stripe' }],
      ['unknown provider', { ...base, payment_method: 'pm_card_visa', provider: 'adyen' }],
      ['payment method with a space', { ...base, payment_method: 'pm card' }],
    ];
    for (const [label, body] of refused) {
      expect(valid(body), `${label}: the document refuses it`).toBe(false);
      const response = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': `openapi-${label.replaceAll(' ', '-')}` } });
      expect(response.status, `${label}: the program refuses it`).toBe(400);
    }
    for (const body of [{ ...base, payer_account_id: 'payer' }, { ...base, payment_method: 'pm_card_visa' }, { ...base, payment_method: 'pm_card_visa', provider: 'stripe' }]) {
      expect(valid(body), JSON.stringify(body)).toBe(true);
    }
  });

  it('describes a provider charge: payment_method, the provider object, requires_action and next_action', () => {
    const charge = document.components.schemas.Charge;
    expect(charge.properties.status.enum).toContain('requires_action');
    expect(charge.properties.payment_method).toMatchObject({ type: 'string' });
    expect(Object.keys(charge.properties.provider.properties).sort()).toEqual(['decline_code', 'name', 'next_action', 'payment_id', 'state']);
    // Nullable: an anyOf of the states' enum and null.
    const state = charge.properties.provider.properties.state;
    expect(state.anyOf.find((branch: any) => branch.enum)?.enum).toEqual(expect.arrayContaining(['requires_action', 'authorized', 'captured']));
    expect(state.anyOf).toContainEqual({ type: 'null' });
    expect(charge.required).toContain('next_action');
    expect(charge.required).not.toContain('provider');
  });

  it('constrains every path and query parameter and the Idempotency-Key header (patterns and lengths)', () => {
    const parameters: Array<[string, string, any]> = [];
    for (const [path, operations] of Object.entries<any>(document.paths)) {
      for (const [method, operation] of Object.entries<any>(operations)) {
        for (const parameter of operation.parameters ?? []) parameters.push([`${method} ${path}`, parameter.in, parameter]);
      }
    }
    const pathAndQuery = parameters.filter(([, where]) => where === 'path' || where === 'query');
    expect(pathAndQuery.length).toBeGreaterThanOrEqual(14);
    for (const [operation, where, parameter] of pathAndQuery) {
      const schema = parameter.schema;
      const label = `${operation} ${where} ${parameter.name}`;
      if (schema.type === 'string' && !schema.enum) {
        expect(schema.maxLength, label).toBeGreaterThan(0);
        expect(schema.pattern, label).toBeTypeOf('string');
        // The patterns must work outside JavaScript too (schema fuzzers are often Python): no \p{…}.
        expect(schema.pattern, label).not.toMatch(/\\p\{/);
        expect(() => new RegExp(schema.pattern, 'u'), label).not.toThrow();
      } else {
        expect(schema.enum ?? schema.maximum, label).toBeDefined();
      }
    }
    const headers = parameters.filter(([, where, p]) => where === 'header' && p.name === 'idempotency-key');
    expect(headers.length).toBeGreaterThanOrEqual(4);
    for (const [operation, , parameter] of headers) {
      expect(parameter.schema, operation).toMatchObject({ type: 'string', minLength: 1, maxLength: 255, pattern: '^[\\x21-\\x7e]{1,255}$' });
    }
    const key = document.paths['/v1/charges/{key}'].get.parameters.find((p: any) => p.name === 'key');
    expect(new RegExp(key.schema.pattern).test('a/b%c')).toBe(true);
    expect(new RegExp(key.schema.pattern).test('a\u0000')).toBe(false);
    const orderId = document.paths['/v1/charges'].get.parameters.find((p: any) => p.name === 'order_id');
    expect(new RegExp(orderId.schema.pattern).test('order\u0007')).toBe(false);
    expect(orderId.schema.maxLength).toBe(255);
  });

  it('documents 413 and 415 on every route that reads a body, and 405 for a wrong method', async () => {
    for (const [path, operations] of Object.entries<any>(document.paths)) {
      // /mcp is the MCP transport's own endpoint (JSON-RPC), outside the REST document's rules.
      if (!operations.post || path === '/mcp') continue;
      expect(Object.keys(operations.post.responses), `post ${path}`).toEqual(expect.arrayContaining(['413', '415']));
    }
    expect(document.components.responses.MethodNotAllowed.content['application/problem+json']).toBeDefined();
    expect(document.info.description).toMatch(/405/);
    const charge = document.components.schemas.CreateChargeRequest;
    expect(charge.properties.order_id).toMatchObject({ maxLength: 255, minLength: 1 });
    expect(charge.properties.description).toMatchObject({ maxLength: 1000 });
    expect(charge.properties.metadata).toMatchObject({ maxProperties: 50, propertyNames: { maxLength: 40 } });
    expect(charge.properties.metadata.additionalProperties).toMatchObject({ maxLength: 500 });
    expect(document.components.schemas.CaptureRequest.properties.amount).toMatchObject({ type: 'integer', minimum: 1 });
    expect(document.components.schemas.CancelRequest).toMatchObject({ maxProperties: 0, additionalProperties: false });
  });

  it('answers a wrong method on a known path with 405, Allow and a problem document', async () => {
    const apiKey = await api.keyFor(`t-openapi-${Date.now().toString(36)}`);
    const cases: Array<[string, string, string]> = [
      ['DELETE', '/v1/charges/some-key', 'GET, HEAD'],
      ['PUT', '/v1/charges', 'GET, POST, HEAD'],
      ['GET', '/v1/charges/some-key/cancel', 'POST'],
      ['PATCH', '/v1/accounts/acct-1', 'GET, HEAD'],
      ['GET', '/v1/accounts/acct-1/deposits', 'POST'],
      ['DELETE', '/v1/charges/k/refunds/r', 'GET, HEAD'],
      ['POST', '/healthz', 'GET, HEAD'],
      ['POST', '/openapi.json', 'GET, HEAD'],
      ['QUERY', '/v1/charges/some-key', 'GET, HEAD'],
    ];
    for (const [method, path, allow] of cases) {
      const response = await api.request(path, { method, apiKey });
      expect(response.status, `${method} ${path}`).toBe(405);
      expect(response.headers.get('allow'), `${method} ${path}`).toBe(allow);
      expect(response.headers.get('content-type'), `${method} ${path}`).toMatch(/^application\/problem\+json/);
      expect(response.body).toMatchObject({ type: 'method_not_allowed', status: 405 });
    }
  });

  // Five places where the document disagreed with the program (found by a schema fuzzer): each fact
  // checked in the served document and, where it can be, against the program itself.
  describe('says what the program does', () => {
    it('issuing an idempotency token takes no body: the body is optional', async () => {
      const issue = document.paths['/v1/idempotency-tokens'].post;
      expect(issue.requestBody.required).toBe(false);
      const issued = await api.request('/v1/idempotency-tokens', { method: 'POST', apiKey: await api.keyFor(`t-openapi-token-${Date.now().toString(36)}`) });
      expect(issued.status).toBe(201);
    });

    it('cancel, capture and refund take no body: their bodies are optional, and none is accepted', async () => {
      for (const path of ['/v1/charges/{key}/cancel', '/v1/charges/{key}/capture', '/v1/charges/{key}/refunds']) {
        expect(document.paths[path].post.requestBody.required, path).toBe(false);
      }
      const { apiKey } = await fundedApiTenant(api, { label: 'openapi-no-body' });
      const charge = async (key: string, capture: string) => {
        const made = await api.request('/v1/charges', { apiKey, body: { order_id: key, payer_account_id: 'payer', payee_account_id: 'payee', amount: 100, currency: 'USD', capture }, headers: { 'idempotency-key': key } });
        expect(made.status).toBe(201);
      };
      await charge('nobody-cancel', 'manual');
      await charge('nobody-capture', 'manual');
      await charge('nobody-refund', 'automatic');
      expect((await api.request('/v1/charges/nobody-cancel/cancel', { method: 'POST', apiKey })).body).toMatchObject({ status: 'cancelled' });
      expect((await api.request('/v1/charges/nobody-capture/capture', { method: 'POST', apiKey })).body).toMatchObject({ status: 'succeeded', amount_captured: 100 });
      const refund = await api.request('/v1/charges/nobody-refund/refunds', { method: 'POST', apiKey, headers: { 'idempotency-key': 'nobody-refund-1' } });
      expect(refund.status).toBe(201);
      expect(refund.body).toMatchObject({ amount: 100, status: 'succeeded' });
    });

    it('POST /mcp documents what the transport and the API hooks answer, not only 200', async () => {
      const responses = document.paths['/mcp'].post.responses;
      expect(Object.keys(responses)).toEqual(expect.arrayContaining(['200', '401', '406', '429']));
      expect(responses['401'].content['application/problem+json']).toBeDefined();
      expect(responses['429'].content['application/problem+json']).toBeDefined();
      expect(responses['406'].content['application/json']).toBeDefined();
      const apiKey = await api.keyFor(`t-openapi-mcp-${Date.now().toString(36)}`);
      const call = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
      expect((await api.request('/mcp', { method: 'POST', body: call, apiKey: null })).status).toBe(401);
      // The streamable HTTP transport wants both media types in Accept.
      expect((await api.request('/mcp', { method: 'POST', body: call, apiKey, headers: { accept: 'application/json' } })).status).toBe(406);
      // A method the endpoint does not take is 405 with Allow, never 404 (schemathesis asked TRACE).
      for (const method of ['GET', 'DELETE', 'PUT', 'PATCH', 'TRACE', 'QUERY'] as const) {
        // Injected: fetch refuses to send TRACE at all.
        const refused = await api.app.inject({ method, url: '/mcp', headers: { authorization: `Bearer ${apiKey}` } });
        expect(refused.statusCode, method).toBe(405);
        expect(refused.headers['allow'], method).toBe('POST');
      }
    });

    it('the payload codec is hidden whole: neither its preflights nor its POSTs are listed, though served', async () => {
      expect(withCodec.app.hasRoute({ method: 'POST', url: '/codec/encode' })).toBe(true);
      expect(withCodec.app.hasRoute({ method: 'OPTIONS', url: '/codec/decode' })).toBe(true);
      const served = (await withCodec.request('/openapi.json')).body;
      expect(Object.keys(served.paths).filter((path) => path.startsWith('/codec'))).toEqual([]);
      for (const [path, operations] of Object.entries<any>(served.paths)) {
        expect(Object.keys(operations), path).not.toContain('options');
      }
    });

    it('the webhook signature header has a pattern that what a provider signs matches and the parser agrees with', () => {
      const header = document.paths['/v1/webhooks/{provider}'].post.parameters.find((p: any) => p.in === 'header' && p.name === 'chargeguard-signature');
      expect(header.required).toBe(true);
      const pattern = new RegExp(header.schema.pattern, 'u');
      const signed = [['s1'], ['s1', 's2'], Array.from({ length: 8 }, (_, i) => `s${i}`)].map((secrets) => webhookSignatureHeaderValue(secrets, 1_764_000_000, '{}'));
      for (const value of signed) {
        expect(pattern.test(value), value).toBe(true);
        expect(parseSignatureHeader(value)).not.toHaveProperty('reason');
      }
      const hex = 'a'.repeat(64);
      const refused = ['', `v1=${hex}`, `t=1764000000`, `t=x,v1=${hex}`, `t=1,v1=${hex.slice(1)}`, `t=1,${Array.from({ length: 9 }, () => `v1=${hex}`).join(',')}`];
      for (const value of refused) {
        expect(pattern.test(value), value).toBe(false);
        expect(parseSignatureHeader(value), value).toHaveProperty('reason');
      }
    });

    it('a charge needs one of Idempotency-Key and Idempotency-Token, neither marked required alone', async () => {
      const parameters = document.paths['/v1/charges'].post.parameters.filter((p: any) => p.in === 'header');
      for (const name of ['idempotency-key', 'idempotency-token']) {
        const parameter = parameters.find((p: any) => p.name === name);
        expect(parameter.required, name).toBe(false);
        expect(parameter.description, name).toMatch(/One of Idempotency-Key and Idempotency-Token is required \(not both\)/);
      }
      const apiKey = await api.keyFor(`t-openapi-key-${Date.now().toString(36)}`);
      const body = { order_id: 'o-1', payer_account_id: 'payer', payee_account_id: 'payee', amount: 100, currency: 'USD' };
      const neither = await api.request('/v1/charges', { method: 'POST', body, apiKey });
      expect(neither.status).toBe(400);
      expect(JSON.stringify(neither.body)).toMatch(/idempotency-key|Idempotency-Key/i);
    });

    it('registering a webhook endpoint requires an Idempotency-Key and documents the replay (200), the conflict (422) and a deleted one (404)', async () => {
      const create = document.paths['/v1/webhook-endpoints'].post;
      const key = create.parameters.find((p: any) => p.in === 'header' && p.name === 'idempotency-key');
      expect(key).toMatchObject({ required: true, schema: { minLength: 1, maxLength: 255 } });
      expect(Object.keys(create.responses)).toEqual(expect.arrayContaining(['200', '201', '404', '422']));
      expect(create.responses['200'].headers).toHaveProperty('Idempotent-Replayed');
      expect(create.description).toMatch(/Exactly once per Idempotency-Key \(required\)/);
      const apiKey = await api.keyFor(`t-openapi-we-${Date.now().toString(36)}`, 'admin');
      const missing = await api.request('/v1/webhook-endpoints', { body: { url: 'https://hooks.example.com/x', enabled_events: ['*'] }, apiKey });
      expect(missing.status).toBe(400);
      expect(missing.body.errors).toEqual([expect.objectContaining({ field: 'Idempotency-Key' })]);
    });
  });

  it('names every operation with a unique camelCase operationId, the ones clients already call unchanged', () => {
    const ids: string[] = [];
    for (const [path, operations] of Object.entries<any>(document.paths)) {
      for (const [method, operation] of Object.entries<any>(operations)) {
        expect(operation.operationId, `${method.toUpperCase()} ${path} has no operationId: add it to operationIds (src/api/openapi.ts)`).toMatch(/^[a-z][A-Za-z0-9]*$/);
        ids.push(operation.operationId);
      }
    }
    expect(new Set(ids).size).toBe(ids.length);
    const named = (method: string, path: string) => document.paths[path][method].operationId;
    expect(named('post', '/v1/charges')).toBe('createCharge');
    expect(named('get', '/v1/charges/{key}')).toBe('getCharge');
    expect(named('post', '/v1/charges/{key}/cancel')).toBe('cancelCharge');
    expect(named('post', '/v1/charges/{key}/capture')).toBe('captureCharge');
    expect(named('post', '/v1/charges/{key}/refunds')).toBe('createRefund');
    expect(named('post', '/v1/accounts')).toBe('createAccount');
    expect(named('get', '/v1/accounts/{id}')).toBe('getAccount');
    expect(named('post', '/v1/accounts/{id}/deposits')).toBe('createDeposit');
  });

  it('states the rules JSON Schema cannot: integers written without a fraction, the deposit key rule, /mcp\'s Accept', async () => {
    const schemas = document.components.schemas;
    const amounts = [
      schemas.CreateChargeRequest.properties.amount,
      schemas.DepositRequest.properties.amount,
      schemas.CaptureRequest.properties.amount,
      schemas.RefundRequest.properties.amount,
    ];
    for (const amount of amounts) {
      expect(amount).toMatchObject({ type: 'integer', minimum: 1, maximum: 1_000_000_000_000 });
      expect(amount.description).toMatch(/minor unit/);
      expect(amount.description).toMatch(/`32\.0`/);
    }
    expect(schemas.IssueIdempotencyTokenRequest.properties.ttl_seconds.description).toMatch(/`32\.0`/);
    // What the descriptions say is what the program does: 32.0 is refused naming the field.
    const { apiKey } = await fundedApiTenant(api, { label: 'openapi-integer' });
    const fraction = await api.request('/v1/charges', {
      apiKey,
      rawBody: '{"order_id":"o-1","payer_account_id":"payer","payee_account_id":"payee","amount":32.0,"currency":"USD"}',
      headers: { 'idempotency-key': `openapi-fraction-${Date.now().toString(36)}` },
    });
    expect(fraction.status).toBe(400);
    expect(fraction.body.errors).toContainEqual(expect.objectContaining({ field: 'amount' }));

    const deposit = document.paths['/v1/accounts/{id}/deposits'].post;
    const keyParameter = deposit.parameters.find((p: any) => p.name === 'idempotency-key');
    expect(keyParameter.required).toBe(false);
    expect(keyParameter.description).toMatch(/unless the body carries `external_id`.*must be equal/);
    expect(schemas.DepositRequest.description).toMatch(/one of the two is required/);

    const mcp = document.paths['/mcp'].post;
    expect(mcp.description).toMatch(/Accept: application\/json, text\/event-stream/);
    expect(mcp.requestBody.content['application/json'].example).toMatchObject({ jsonrpc: '2.0' });
  });

  it('states who pays as a oneOf of two object shapes, each forbidding the other payer field', () => {
    const request = document.components.schemas.CreateChargeRequest;
    expect(request.oneOf.map((branch: any) => branch.required)).toEqual([['payer_account_id'], ['payment_method']]);
    expect(request.oneOf[0].properties).toMatchObject({ payment_method: false, provider: false });
    expect(request.oneOf[1].properties).toMatchObject({ payer_account_id: false });
    // capture has a default: never required, so generated request types leave it optional.
    expect(request.required).not.toContain('capture');
    expect(request.properties.capture.default).toBe('automatic');
  });

  it('is browsable at /docs', async () => {
    const page = await api.request('/docs/');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    expect(page.text).toMatch(/swagger/i);
  });
});
