import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTestApi, type TestApi } from './api-support.js';

let api: TestApi;
let document: any;
beforeAll(async () => {
  api = await openTestApi();
  const response = await api.request('/openapi.json');
  expect(response.status).toBe(200);
  document = response.body;
});
afterAll(async () => {
  await api?.close();
});

/** The routes of contract section 6 (and the listing routes beside them), as OpenAPI paths. */
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
  ['get', '/v1/accounts/{id}'],
  ['post', '/v1/accounts/{id}/deposits'],
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
          if (Number(code) >= 400 && response.content) {
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
    expect(Object.keys(create.responses).sort()).toEqual(['200', '201', '202', '400', '401', '422', '503']);
    expect(create.parameters).toContainEqual(expect.objectContaining({ in: 'header', name: 'idempotency-key', required: true }));
    expect(create.requestBody.content['application/json'].schema).toEqual({ $ref: '#/components/schemas/CreateChargeRequest' });
    const request = document.components.schemas.CreateChargeRequest;
    expect(request.required).toEqual(expect.arrayContaining(['order_id', 'payer_account_id', 'payee_account_id', 'amount', 'currency']));
    expect(request.properties.amount).toMatchObject({ type: 'integer', minimum: 1 });
  });

  it('is browsable at /docs', async () => {
    const page = await api.request('/docs/');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/text\/html/);
    expect(page.text).toMatch(/swagger/i);
  });
});
