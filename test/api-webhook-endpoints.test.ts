import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { exampleEndpointId, requestExamples } from '../src/api/openapi.js';
import { newEventId } from '../src/ledger/webhook-endpoints.js';
import { useApi } from './support/api.js';
import { newTenant, openAccount } from './support/harness.js';
import { startReceiver, type Receiver } from './support/receivers.js';

// The production door: https only, no loopback or private addresses.
const api = useApi();
// The door as tests and development set it: http and loopback allowed.
const dev = useApi({ env: { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_LOOPBACK: 'true' } });

let rx: Receiver;
beforeAll(async () => {
  rx = await startReceiver();
});
afterAll(async () => {
  await rx.close();
});

async function admin(which: typeof api, label: string): Promise<{ tenant: string; key: string }> {
  const tenant = newTenant(label);
  return { tenant, key: await which.keyFor(tenant, 'admin') };
}

async function createOn(key: string, body: Record<string, unknown> = {}) {
  const response = await dev.request('/v1/webhook-endpoints', { apiKey: key, body: { url: rx.url, enabled_events: ['charge.succeeded'], ...body } });
  expect(response.status, response.text).toBe(201);
  return response.body;
}

/** A real event: a deposit, whose deposit.credited event the ledger's outbox writer adds. Its id. */
async function insertEvent(tenant: string): Promise<string> {
  await openAccount(dev.context.ledger, tenant, `wh-${randomBytes(4).toString('hex')}`, { depositMinor: 100 });
  const { rows } = await dev.context.ledger.query<{ id: string }>(
    "SELECT id FROM events WHERE tenant = $1 AND type = 'deposit.credited' ORDER BY seq DESC LIMIT 1",
    [tenant],
  );
  return rows[0]!.id;
}

describe('POST /v1/webhook-endpoints', () => {
  it('registers an endpoint and answers its Standard Webhooks secret once; reads never show it', async () => {
    const { key } = await admin(dev, 'we-create');
    const created = await createOn(key, { description: 'orders', enabled_events: ['charge.succeeded', 'refund.failed'] });
    expect(created).toMatchObject({
      object: 'webhook_endpoint',
      id: expect.stringMatching(/^we_[A-Za-z0-9]{24}$/),
      url: rx.url,
      enabled_events: ['charge.succeeded', 'refund.failed'],
      description: 'orders',
      status: 'enabled',
      disabled_reason: null,
      secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]{43}=$/),
    });
    // The official library takes it as it is.
    expect(() => new Webhook(created.secret)).not.toThrow();
    const read = await dev.request(`/v1/webhook-endpoints/${created.id}`, { apiKey: key });
    expect(read.status).toBe(200);
    expect(read.body).not.toHaveProperty('secret');
    expect(read.text).not.toContain(created.secret.slice(6));
    const list = await dev.request('/v1/webhook-endpoints', { apiKey: key });
    expect(list.body).toMatchObject({ object: 'list', has_more: false, url: '/v1/webhook-endpoints' });
    expect(list.body.data.map((e: { id: string }) => e.id)).toEqual([created.id]);
    expect(list.text).not.toContain(created.secret.slice(6));
  });

  it('refuses bad input with 400 naming the field, nothing registered', async () => {
    const { tenant, key } = await admin(api, 'we-bad');
    const cases: Array<[Record<string, unknown>, string, RegExp]> = [
      [{ url: 'http://hooks.example.com/x', enabled_events: ['*'] }, 'url', /https/],
      [{ url: 'https://user:secret@hooks.example.com/x', enabled_events: ['*'] }, 'url', /credentials/],
      [{ url: 'https://127.0.0.1/x', enabled_events: ['*'] }, 'url', /loopback/],
      [{ url: 'https://[::1]/x', enabled_events: ['*'] }, 'url', /loopback/],
      [{ url: 'https://[::ffff:127.0.0.1]/x', enabled_events: ['*'] }, 'url', /loopback/],
      [{ url: 'https://169.254.169.254/latest/meta-data', enabled_events: ['*'] }, 'url', /metadata/],
      [{ url: 'https://10.0.0.5/x', enabled_events: ['*'] }, 'url', /private/],
      [{ url: 'https://100.64.1.1/x', enabled_events: ['*'] }, 'url', /carrier-grade/],
      [{ url: 'https://0.0.0.0/x', enabled_events: ['*'] }, 'url', /unspecified/],
      [{ url: 'https://[fe80::1]/x', enabled_events: ['*'] }, 'url', /link-local/],
      [{ url: `https://8.8.8.8/${'a'.repeat(2_100)}`, enabled_events: ['*'] }, 'url', /2048/],
      [{ enabled_events: ['*'] }, 'url', /./],
      [{ url: 'https://8.8.8.8/x', enabled_events: [] }, 'enabled_events', /at least one/],
      [{ url: 'https://8.8.8.8/x', enabled_events: ['Charge Succeeded'] }, 'enabled_events.0', /event type/],
      [{ url: 'https://8.8.8.8/x', enabled_events: ['charge.succeeded', 'charge.succeeded'] }, 'enabled_events', /twice/],
      [{ url: 'https://8.8.8.8/x', enabled_events: Array.from({ length: 33 }, (_, i) => `charge.t${String.fromCharCode(97 + (i % 26))}${i}`.replace(/[0-9]/g, 'x')) }, 'enabled_events', /32/],
      [{ url: 'https://8.8.8.8/x', enabled_events: ['*'], description: 'x'.repeat(501) }, 'description', /500/],
      [{ url: 'https://8.8.8.8/x', enabled_events: ['*'], secret: 'mine' }, 'secret', /./],
    ];
    for (const [body, field, message] of cases) {
      const response = await api.request('/v1/webhook-endpoints', { apiKey: key, body });
      expect(response.status, `${JSON.stringify(body).slice(0, 80)}: ${response.text}`).toBe(400);
      const error = response.body.errors.find((e: { field: string }) => e.field === field);
      expect(error, `${JSON.stringify(body).slice(0, 80)} names ${field}: ${response.text}`).toBeDefined();
      expect(error.message).toMatch(message);
    }
    const count = await api.context.ledger.query('SELECT count(*)::int AS n FROM webhook_endpoints WHERE tenant = $1', [tenant]);
    expect(count.rows[0].n).toBe(0);
  });

  it('an agent key is refused (403) on every webhook endpoint route', async () => {
    const tenant = newTenant('we-agent');
    const agent = await dev.keyFor(tenant);
    const id = exampleEndpointId;
    for (const [method, path, body] of [
      ['POST', '/v1/webhook-endpoints', { url: rx.url, enabled_events: ['*'] }],
      ['GET', '/v1/webhook-endpoints', undefined],
      ['GET', `/v1/webhook-endpoints/${id}`, undefined],
      ['POST', `/v1/webhook-endpoints/${id}`, { disabled: true }],
      ['DELETE', `/v1/webhook-endpoints/${id}`, undefined],
      ['POST', `/v1/webhook-endpoints/${id}/rotate-secret`, {}],
      ['GET', `/v1/webhook-endpoints/${id}/deliveries`, undefined],
      ['POST', `/v1/webhook-endpoints/${id}/deliveries`, { event: newEventId() }],
    ] as const) {
      const response = await dev.request(path, { method, apiKey: agent, ...(body ? { body } : {}) });
      expect(response.status, `${method} ${path}`).toBe(403);
      expect(response.body).toMatchObject({ type: 'forbidden', operation: 'webhook_endpoints.manage' });
    }
  });

  it('at most endpointsPerTenantMax (16) endpoints per tenant: the 17th is a 400 naming the limit', async () => {
    const { key } = await admin(dev, 'we-limit');
    for (let i = 0; i < 16; i += 1) await createOn(key);
    const over = await dev.request('/v1/webhook-endpoints', { apiKey: key, body: { url: rx.url, enabled_events: ['*'] } });
    expect(over.status).toBe(400);
    expect(over.body.errors[0].message).toMatch(/16 webhook endpoints.*endpointsPerTenantMax/);
  });
});

describe('the endpoint lifecycle', () => {
  it('list pages newest first with cursors; an unknown cursor is a 400 naming it', async () => {
    const { key } = await admin(dev, 'we-pages');
    const ids: string[] = [];
    for (let i = 0; i < 3; i += 1) ids.push((await createOn(key)).id);
    const first = await dev.request('/v1/webhook-endpoints?limit=2', { apiKey: key });
    expect(first.body.data.map((e: { id: string }) => e.id)).toEqual([ids[2], ids[1]]);
    expect(first.body.has_more).toBe(true);
    const next = await dev.request(`/v1/webhook-endpoints?limit=2&starting_after=${ids[1]}`, { apiKey: key });
    expect(next.body.data.map((e: { id: string }) => e.id)).toEqual([ids[0]]);
    expect(next.body.has_more).toBe(false);
    const back = await dev.request(`/v1/webhook-endpoints?limit=2&ending_before=${ids[0]}`, { apiKey: key });
    expect(back.body.data.map((e: { id: string }) => e.id)).toEqual([ids[2], ids[1]]);
    const unknown = await dev.request('/v1/webhook-endpoints?starting_after=we_nope', { apiKey: key });
    expect(unknown.status).toBe(400);
    expect(unknown.body.errors[0].field).toBe('starting_after');
  });

  it('update, disable, enable, rotate, list attempts, redeliver, delete', async () => {
    const { tenant, key } = await admin(dev, 'we-life');
    const created = await createOn(key);
    const path = `/v1/webhook-endpoints/${created.id}`;
    const updated = await dev.request(path, { apiKey: key, body: { enabled_events: ['*'], description: 'all of it' } });
    expect(updated.body).toMatchObject({ enabled_events: ['*'], description: 'all of it', url: rx.url });
    const disabled = await dev.request(path, { apiKey: key, body: { disabled: true } });
    expect(disabled.body).toMatchObject({ status: 'disabled', disabled_reason: 'requested', disabled_at: expect.any(String) });
    const enabled = await dev.request(path, { apiKey: key, body: { disabled: false } });
    expect(enabled.body).toMatchObject({ status: 'enabled', disabled_reason: null, disabled_at: null });
    const badUrl = await dev.request(path, { apiKey: key, body: { url: 'https://169.254.169.254/' } });
    expect(badUrl.status).toBe(400);
    expect(badUrl.body.errors[0]).toMatchObject({ field: 'url', message: expect.stringMatching(/metadata/) });
    expect((await dev.request(path, { apiKey: key, body: { disabled: null } })).body.errors[0].field).toBe('disabled');

    const rotated = await dev.request(`${path}/rotate-secret`, { method: 'POST', apiKey: key });
    expect(rotated.status, rotated.text).toBe(200);
    expect(rotated.body).toMatchObject({ object: 'webhook_endpoint_secret', endpoint_id: created.id, secret: expect.stringMatching(/^whsec_/) });
    expect(rotated.body.secret).not.toBe(created.secret);
    // The default overlap: the previous secret signs for 24 more hours.
    const overlapMs = Date.parse(rotated.body.previous_secrets_expire_at) - Date.now();
    expect(overlapMs).toBeGreaterThan(23.9 * 3_600_000);
    expect(overlapMs).toBeLessThanOrEqual(24 * 3_600_000);
    for (const overlap of [-1, 1.5, 604_801, '60', null]) {
      const refused = await dev.request(`${path}/rotate-secret`, { apiKey: key, body: { overlap_seconds: overlap } });
      expect(refused.status, `overlap_seconds ${overlap}`).toBe(400);
      expect(refused.body.errors[0].field).toBe('overlap_seconds');
    }
    const live = await dev.context.ledger.query('SELECT count(*)::int AS n FROM webhook_endpoint_secrets WHERE endpoint_id = $1 AND (expires_at IS NULL OR expires_at > now())', [created.id]);
    expect(live.rows[0].n).toBe(2);

    const attempts = await dev.request(`${path}/deliveries?limit=5`, { apiKey: key });
    expect(attempts.body).toMatchObject({ object: 'list', data: [], has_more: false });
    expect((await dev.request(`${path}/deliveries?limit=0`, { apiKey: key })).body.errors[0].field).toBe('limit');
    const unknownEvent = await dev.request(`${path}/deliveries`, { apiKey: key, body: { event: newEventId() } });
    expect(unknownEvent.status).toBe(400);
    expect(unknownEvent.body.errors[0]).toMatchObject({ field: 'event', message: 'names no event of this tenant' });
    const eventId = await insertEvent(tenant);
    const again = await dev.request(`${path}/deliveries`, { apiKey: key, body: { event: eventId } });
    expect(again.status).toBe(202);
    expect(again.body).toMatchObject({ object: 'webhook_delivery', endpoint_id: created.id, event_id: eventId, state: 'pending' });

    const deleted = await dev.request(path, { method: 'DELETE', apiKey: key });
    expect(deleted.body).toEqual({ id: created.id, object: 'webhook_endpoint', deleted: true });
    expect((await dev.request(path, { apiKey: key })).status).toBe(404);
    const leftovers = await dev.context.ledger.query('SELECT (SELECT count(*)::int FROM webhook_endpoint_secrets WHERE endpoint_id = $1) + (SELECT count(*)::int FROM webhook_deliveries WHERE endpoint_id = $1) AS n', [created.id]);
    expect(leftovers.rows[0].n).toBe(0);
  });

  it("tenant isolation: another tenant's admin sees none of it and gets 404 on every route naming it", async () => {
    const owner = await admin(dev, 'we-iso-a');
    const other = await admin(dev, 'we-iso-b');
    const created = await createOn(owner.key);
    const id = created.id;
    expect((await dev.request('/v1/webhook-endpoints', { apiKey: other.key })).body.data).toEqual([]);
    for (const [method, path, body] of [
      ['GET', `/v1/webhook-endpoints/${id}`, undefined],
      ['POST', `/v1/webhook-endpoints/${id}`, { disabled: true }],
      ['POST', `/v1/webhook-endpoints/${id}/rotate-secret`, {}],
      ['GET', `/v1/webhook-endpoints/${id}/deliveries`, undefined],
      ['POST', `/v1/webhook-endpoints/${id}/deliveries`, { event: await insertEvent(other.tenant) }],
      ['DELETE', `/v1/webhook-endpoints/${id}`, undefined],
    ] as const) {
      const response = await dev.request(path, { method, apiKey: other.key, ...(body ? { body } : {}) });
      expect(response.status, `${method} ${path}`).toBe(404);
    }
    const cursor = await dev.request(`/v1/webhook-endpoints?starting_after=${id}`, { apiKey: other.key });
    expect(cursor.status).toBe(400);
    // Still there, still enabled, one secret.
    expect((await dev.request(`/v1/webhook-endpoints/${id}`, { apiKey: owner.key })).body).toMatchObject({ id, status: 'enabled' });
  });

  it('every webhook endpoint example of the OpenAPI document succeeds, its URL on a loopback receiver and its ids the real ones', async () => {
    const { tenant, key } = await admin(dev, 'we-examples');
    const create = requestExamples.createWebhookEndpoint!.body as Record<string, unknown>;
    const created = await dev.request('/v1/webhook-endpoints', { apiKey: key, body: { ...create, url: rx.url } });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const eventId = await insertEvent(tenant);
    const operations: Array<[string, string, string]> = [
      ['listWebhookEndpoints', 'GET', '/v1/webhook-endpoints'],
      ['getWebhookEndpoint', 'GET', `/v1/webhook-endpoints/${id}`],
      ['updateWebhookEndpoint', 'POST', `/v1/webhook-endpoints/${id}`],
      ['rotateWebhookEndpointSecret', 'POST', `/v1/webhook-endpoints/${id}/rotate-secret`],
      ['listWebhookDeliveryAttempts', 'GET', `/v1/webhook-endpoints/${id}/deliveries`],
      ['redeliverWebhookEvent', 'POST', `/v1/webhook-endpoints/${id}/deliveries`],
      ['deleteWebhookEndpoint', 'DELETE', `/v1/webhook-endpoints/${id}`],
    ];
    for (const [operationId, method, path] of operations) {
      const example = requestExamples[operationId]!;
      const query = Object.entries(example.parameters ?? {}).filter(([name]) => name === 'limit');
      const body = operationId === 'redeliverWebhookEvent' ? { event: eventId } : example.body;
      const url = query.length > 0 ? `${path}?${new URLSearchParams(query.map(([n, v]): [string, string] => [n, String(v)]))}` : path;
      const response = await dev.request(url, { method, apiKey: key, ...(body !== undefined ? { body } : {}) });
      expect(response.status, `${operationId}: ${response.text}`).toBeGreaterThanOrEqual(200);
      expect(response.status, `${operationId}: ${response.text}`).toBeLessThan(300);
    }
  });

  it('a wrong method is a 405 naming what the path takes', async () => {
    const { key } = await admin(dev, 'we-405');
    const response = await dev.request(`/v1/webhook-endpoints/${exampleEndpointId}`, { method: 'PUT', apiKey: key, body: {} });
    expect(response.status).toBe(405);
    expect(response.headers.get('allow')).toBe('GET, POST, DELETE, HEAD');
  });
});

describe('the CLI: webhook-endpoints', () => {
  it('create (secret printed once), list, update, rotate-secret, delete; bad input exits non-zero naming the field', { timeout: 240_000 }, async () => {
    const { runCli } = await import('./support/cli.js');
    const tenant = newTenant('we-cli');
    const env = { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_LOOPBACK: 'true' };
    const created = await runCli(['webhook-endpoints', 'create', '--tenant', tenant, '--url', rx.url, '--events', 'charge.succeeded,refund.failed', '--json'], env);
    expect(created.code, created.stderr).toBe(0);
    expect(created.json).toMatchObject({ object: 'webhook_endpoint', url: rx.url, enabled_events: ['charge.succeeded', 'refund.failed'], secret: expect.stringMatching(/^whsec_/) });
    const id: string = created.json.id;
    const listed = await runCli(['webhook-endpoints', 'list', '--tenant', tenant], env);
    expect(listed.stdout).toContain(id);
    expect(listed.stdout).not.toContain(created.json.secret);
    const disabled = await runCli(['webhook-endpoints', 'update', id, '--tenant', tenant, '--disable', '--json'], env);
    expect(disabled.json).toMatchObject({ status: 'disabled', disabled_reason: 'requested' });
    const rotated = await runCli(['webhook-endpoints', 'rotate-secret', id, '--tenant', tenant, '--overlap-seconds', '0', '--json'], env);
    expect(rotated.json.secret).toMatch(/^whsec_/);
    expect((await runCli(['webhook-endpoints', 'delete', id, '--tenant', tenant], env)).code).toBe(0);
    const refused = await runCli(['webhook-endpoints', 'create', '--tenant', tenant, '--url', 'https://169.254.169.254/', '--events', '*', '--json']);
    expect(refused.code).not.toBe(0);
    expect(refused.stdout + refused.stderr).toMatch(/url/);
  });
});
