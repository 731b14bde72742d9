import { beforeAll, describe, expect, it } from 'vitest';
import { fundedApiTenant, useApi } from './support/api.js';

const api = useApi();
let document: any;
beforeAll(async () => {
  document = (await api.request('/openapi.json')).body;
});

/** Provider callbacks: authenticated by a signature over a fresh timestamp, which no fixed example can carry. */
const signedCallbacks = new Set(['receiveWebhook', 'receiveProviderEvent']);

/**
 * Webhook endpoints: the example URL's host must resolve through the outbound door, and this
 * machine need not have DNS; the rest name the endpoint the create made. test/api-webhook-endpoints.test.ts
 * sends every one of these examples, with the URL on a loopback receiver and the id the create answered.
 */
const outboundDoor = new Set([
  'createWebhookEndpoint',
  'listWebhookEndpoints',
  'getWebhookEndpoint',
  'updateWebhookEndpoint',
  'deleteWebhookEndpoint',
  'rotateWebhookEndpointSecret',
  'listWebhookDeliveryAttempts',
  'redeliverWebhookEvent',
]);

/**
 * The order the examples build on each other, as in docs/api.md's walk-through: accounts, a deposit,
 * the charge, what reads or refunds it. Operations not named here (new ones) run after these.
 */
const walkThrough = ['createAccount', 'createDeposit', 'getAccount', 'createCharge', 'getCharge', 'listCharges', 'cancelCharge', 'captureCharge', 'createRefund', 'listRefunds', 'getRefund'];

interface Operation {
  method: string;
  path: string;
  operation: any;
}

function operationsOf(doc: any): Operation[] {
  const all: Operation[] = [];
  for (const [path, operations] of Object.entries<any>(doc.paths)) {
    for (const [method, operation] of Object.entries<any>(operations)) all.push({ method, path, operation });
  }
  const rank = (o: Operation) => {
    const at = walkThrough.indexOf(o.operation.operationId);
    return at === -1 ? walkThrough.length : at;
  };
  return all.sort((a, b) => rank(a) - rank(b));
}

/** The request an operation's examples make, as Swagger UI's "Try it out" sends it unchanged. */
function exampleRequest({ method, path, operation }: Operation): { url: string; method: string; headers: Record<string, string>; body?: unknown } {
  let url = path;
  const query = new URLSearchParams();
  const headers: Record<string, string> = {};
  for (const parameter of operation.parameters ?? []) {
    if (parameter.example === undefined) {
      expect(parameter.required, `${operation.operationId}: required ${parameter.in} parameter ${parameter.name} has no example`).not.toBe(true);
      continue;
    }
    const value = String(parameter.example);
    if (parameter.in === 'path') url = url.replace(`{${parameter.name}}`, encodeURIComponent(value));
    else if (parameter.in === 'query') query.set(parameter.name, value);
    else if (parameter.in === 'header') headers[parameter.name] = value;
  }
  expect(url, `${operation.operationId}: every path parameter has an example`).not.toMatch(/\{/);
  const media = operation.requestBody?.content?.['application/json'];
  if (operation.requestBody?.required) expect(media?.example, `${operation.operationId}: a required body has an example`).toBeDefined();
  const search = query.toString();
  return { url: search ? `${url}?${search}` : url, method: method.toUpperCase(), headers, ...(media?.example !== undefined ? { body: media.example } : {}) };
}

describe("every operation's example, sent unchanged, succeeds", () => {
  it('against a tenant set up as docs/api.md walks through (payer and payee, USD; manual charges order-1002 and order-1003)', async () => {
    // What the examples name: the walk-through's accounts (payer funded), and the manual-capture
    // charges the cancel and capture examples act on, as their parameter descriptions say.
    const { apiKey } = await fundedApiTenant(api, { label: 'examples', role: 'admin' });
    const answers: string[] = [];
    for (const operation of operationsOf(document)) {
      const id = operation.operation.operationId;
      if (signedCallbacks.has(id) || outboundDoor.has(id)) continue;
      if (id === 'cancelCharge') {
        for (const key of ['order-1002', 'order-1003']) {
          const body = { order_id: key.replace('order-', ''), payer_account_id: 'payer', payee_account_id: 'payee', amount: 2500, currency: 'USD', capture: 'manual' };
          const manual = await api.request('/v1/charges', { apiKey, body, headers: { 'idempotency-key': key } });
          expect(manual.status, `seeding ${key}: ${manual.text}`).toBe(201);
          expect(manual.body.status).toBe('reserved');
        }
      }
      const request = exampleRequest(operation);
      // getEvent's example has only an event id's shape (ids are random): the id of one of the
      // walk-through's events stands in, as a person trying it out pastes one from listEvents.
      if (id === 'getEvent') {
        const events = await api.request('/v1/events?limit=1', { apiKey });
        expect(events.body.data, 'the walk-through wrote events').toHaveLength(1);
        request.url = request.url.replace(/evt_[0-9a-f]+/, events.body.data[0].id);
      }
      // /mcp: the Accept its description requires (OpenAPI ignores Accept as a parameter).
      if (id === 'mcp') request.headers.accept = 'application/json, text/event-stream';
      const response = await api.request(request.url, { method: request.method, headers: request.headers, apiKey, ...(request.body !== undefined ? { body: request.body } : {}) });
      answers.push(`${id} ${response.status}`);
      expect(response.status, `${id}: ${request.method} ${request.url} ${JSON.stringify(request.body ?? null)} answered ${response.text.slice(0, 400)}`).toBeGreaterThanOrEqual(200);
      expect(response.status, `${id}: ${request.method} ${request.url} answered ${response.text.slice(0, 400)}`).toBeLessThan(300);
    }
    // The walk-through's money moved as the examples say: 10,000 + 10,000 deposited, 2,500 charged,
    // 2,000 of order-1003 captured, 500 refunded, order-1002 released.
    const payer = await api.request('/v1/accounts/payer', { apiKey });
    expect(payer.body).toMatchObject({ posted: 20_000 - 2_500 - 2_000 + 500, pending: 0 });
    expect(answers.filter((a) => a.startsWith('createCharge'))).toEqual(['createCharge 201']);
    expect(answers.length).toBe(operationsOf(document).length - signedCallbacks.size - outboundDoor.size);
  });

  it('a repeat of the whole walk-through replays: Swagger UI\'s Try it out can be pressed twice', async () => {
    const { apiKey } = await fundedApiTenant(api, { label: 'examples-twice', role: 'admin' });
    const create = operationsOf(document).find((o) => o.operation.operationId === 'createCharge')!;
    const request = exampleRequest(create);
    const first = await api.request(request.url, { method: 'POST', headers: request.headers, apiKey, body: request.body });
    const again = await api.request(request.url, { method: 'POST', headers: request.headers, apiKey, body: request.body });
    expect([first.status, again.status]).toEqual([201, 200]);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body.id).toBe(first.body.id);
  });
});
