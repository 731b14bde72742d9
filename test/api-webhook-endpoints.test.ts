import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { exampleEndpointId, requestExamples } from '../src/api/openapi.js';
import { newEventId } from '../src/ledger/webhook-endpoints.js';
import { useApi } from './support/api.js';
import { newKey, newTenant, openAccount } from './support/harness.js';
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

/** A registration's Idempotency-Key header: a new key, a new endpoint. */
function keyed(label = 'we'): { 'idempotency-key': string } {
  return { 'idempotency-key': newKey(label) };
}

async function createOn(key: string, body: Record<string, unknown> = {}) {
  const response = await dev.request('/v1/webhook-endpoints', { apiKey: key, headers: keyed(), body: { url: rx.url, enabled_events: ['charge.succeeded'], ...body } });
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
      const response = await api.request('/v1/webhook-endpoints', { apiKey: key, headers: keyed(), body });
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
    const firstKey = keyed();
    const first = await dev.request('/v1/webhook-endpoints', { apiKey: key, headers: firstKey, body: { url: rx.url, enabled_events: ['*'] } });
    expect(first.status, first.text).toBe(201);
    for (let i = 1; i < 16; i += 1) await createOn(key);
    const over = await dev.request('/v1/webhook-endpoints', { apiKey: key, headers: keyed(), body: { url: rx.url, enabled_events: ['*'] } });
    expect(over.status).toBe(400);
    expect(over.body.errors[0].message).toMatch(/16 webhook endpoints.*endpointsPerTenantMax/);
    // A retry of a registration already made is answered, limit or not: it adds nothing.
    const retry = await dev.request('/v1/webhook-endpoints', { apiKey: key, headers: firstKey, body: { url: rx.url, enabled_events: ['*'] } });
    expect(retry.status, retry.text).toBe(200);
    expect(retry.body).toEqual(first.body);
  });
});

describe('POST /v1/webhook-endpoints is exactly-once per Idempotency-Key', () => {
  const create = (apiKey: string, idempotencyKey: string | null, body: Record<string, unknown>) =>
    dev.request('/v1/webhook-endpoints', { apiKey, body, ...(idempotencyKey === null ? {} : { headers: { 'idempotency-key': idempotencyKey } }) });
  const countOf = async (tenant: string) =>
    (
      await dev.context.ledger.query<{ endpoints: number; secrets: number }>(
        `SELECT count(*)::int AS endpoints,
                (SELECT count(*)::int FROM webhook_endpoint_secrets s JOIN webhook_endpoints e ON e.id = s.endpoint_id WHERE e.tenant = $1) AS secrets
           FROM webhook_endpoints WHERE tenant = $1`,
        [tenant],
      )
    ).rows[0]!;

  it('five identical creates at the same moment make one endpoint: one 201, four replays of the same answer (same id, same secret)', async () => {
    const { tenant, key } = await admin(dev, 'we-once-race');
    const idempotencyKey = newKey('we-race');
    const body = { url: rx.url, enabled_events: ['charge.succeeded', 'refund.failed'], description: 'orders' };
    const answers = await Promise.all(Array.from({ length: 5 }, () => create(key, idempotencyKey, body)));
    expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 200, 200, 201]);
    const first = answers.find((a) => a.status === 201)!;
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(first.body).toMatchObject({ id: expect.stringMatching(/^we_[A-Za-z0-9]{24}$/), secret: expect.stringMatching(/^whsec_[A-Za-z0-9+/]{43}=$/), ...body });
    for (const replay of answers.filter((a) => a.status === 200)) {
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.headers.get('location')).toBe(`/v1/webhook-endpoints/${first.body.id}`);
      // The first answer, byte for byte: the same fields in the same order.
      expect(replay.text).toBe(first.text);
    }
    expect(await countOf(tenant)).toEqual({ endpoints: 1, secrets: 1 });
  });

  it('a retry after the first answer gets that answer again, even after an update and a rotation; another tenant\'s same key is its own', async () => {
    const { tenant, key } = await admin(dev, 'we-once-retry');
    const idempotencyKey = newKey('we-retry');
    const body = { url: rx.url, enabled_events: ['*'] };
    const first = await create(key, idempotencyKey, body);
    expect(first.status, first.text).toBe(201);
    const again = await create(key, idempotencyKey, body);
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);

    // Changed and rotated since: a retry still answers what the first create answered, as Stripe
    // replays the original response (the caller whose answer was lost learns the secret it got).
    const path = `/v1/webhook-endpoints/${first.body.id}`;
    expect((await dev.request(path, { apiKey: key, body: { description: 'changed' } })).status).toBe(200);
    expect((await dev.request(`${path}/rotate-secret`, { apiKey: key, body: { overlap_seconds: 0 } })).status).toBe(200);
    const later = await create(key, idempotencyKey, body);
    expect(later.status).toBe(200);
    expect(later.text).toBe(first.text);
    expect(await countOf(tenant)).toEqual({ endpoints: 1, secrets: 2 });

    // Keys are per tenant: the same key elsewhere registers that tenant's own endpoint.
    const other = await admin(dev, 'we-once-other');
    const elsewhere = await create(other.key, idempotencyKey, body);
    expect(elsewhere.status, elsewhere.text).toBe(201);
    expect(elsewhere.body.id).not.toBe(first.body.id);
    expect(elsewhere.body.secret).not.toBe(first.body.secret);

    // Deleted: the key does not register it again; a new key does.
    expect((await dev.request(path, { method: 'DELETE', apiKey: key })).status).toBe(200);
    const afterDelete = await create(key, idempotencyKey, body);
    expect(afterDelete.status, afterDelete.text).toBe(404);
    expect(afterDelete.body.detail).toContain(first.body.id);
    expect(afterDelete.body.detail).toContain(idempotencyKey);
    expect(await countOf(tenant)).toEqual({ endpoints: 0, secrets: 0 });
    expect((await create(key, newKey('we-new'), body)).status).toBe(201);
  });

  it('the same key with a different body is an idempotency conflict naming the key, nothing registered', async () => {
    const { tenant, key } = await admin(dev, 'we-once-conflict');
    const idempotencyKey = newKey('we-conflict');
    const body = { url: rx.url, enabled_events: ['charge.succeeded'], description: 'orders' };
    const first = await create(key, idempotencyKey, body);
    expect(first.status, first.text).toBe(201);
    for (const changed of [
      { ...body, url: `${rx.url}?other` },
      { ...body, enabled_events: ['charge.succeeded', 'refund.failed'] },
      { ...body, description: 'other' },
      { url: body.url, enabled_events: body.enabled_events },
    ]) {
      const conflict = await create(key, idempotencyKey, changed);
      expect(conflict.status, `${JSON.stringify(changed)}: ${conflict.text}`).toBe(422);
      expect(conflict.body).toMatchObject({ type: 'idempotency_conflict' });
      expect(conflict.body.detail).toContain(idempotencyKey);
      expect(conflict.body.detail).toContain(first.body.id);
      expect(conflict.text).not.toContain(first.body.secret);
    }
    expect(await countOf(tenant)).toEqual({ endpoints: 1, secrets: 1 });
  });

  it('the key is required and has the limits of every Idempotency-Key: 1-255 visible ASCII characters', async () => {
    const { tenant, key } = await admin(dev, 'we-once-key');
    const body = { url: rx.url, enabled_events: ['*'] };
    const cases: Array<[string | null, RegExp]> = [
      [null, /required/],
      ['k'.repeat(256), /256 characters long; at most 255/],
      ['with space', /visible ASCII/],
      ['caf\u00e9', /visible ASCII/],
    ];
    for (const [idempotencyKey, message] of cases) {
      // é is one byte of Latin-1, which a header carries as sent; the key's rule refuses it.
      const refused = await create(key, idempotencyKey, body);
      expect(refused.status, `${idempotencyKey?.slice(0, 20)}: ${refused.text}`).toBe(400);
      expect(refused.body.errors).toEqual([{ field: 'Idempotency-Key', message: expect.stringMatching(message) }]);
    }
    expect(await countOf(tenant)).toEqual({ endpoints: 0, secrets: 0 });
    const longest = await create(key, '~'.repeat(255), body);
    expect(longest.status, longest.text).toBe(201);
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
    const exampleKey = String(requestExamples.createWebhookEndpoint!.parameters!['idempotency-key']);
    const created = await dev.request('/v1/webhook-endpoints', { apiKey: key, headers: { 'idempotency-key': exampleKey }, body: { ...create, url: rx.url } });
    expect(created.status, created.text).toBe(201);
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
    const createArgs = ['webhook-endpoints', 'create', '--tenant', tenant, '--url', rx.url, '--events', 'charge.succeeded,refund.failed', '--idempotency-key', 'cli-orders', '--json'];
    const created = await runCli(createArgs, env);
    expect(created.code, created.stderr).toBe(0);
    expect(created.json).toMatchObject({ object: 'webhook_endpoint', url: rx.url, enabled_events: ['charge.succeeded', 'refund.failed'], secret: expect.stringMatching(/^whsec_/) });
    const id: string = created.json.id;
    // A rerun with the same key prints the first run's endpoint and secret; none is added.
    const rerun = await runCli(createArgs.filter((arg) => arg !== '--json'), env);
    expect(rerun.code, rerun.stderr).toBe(0);
    expect(rerun.stdout).toContain(created.json.secret);
    expect(rerun.stdout).toMatch(/registered earlier under --idempotency-key cli-orders/);
    const badKey = await runCli([...createArgs.slice(0, -3), '--idempotency-key', 'has space', '--json'], env);
    expect(badKey.code).toBe(2);
    expect(badKey.json.error.errors.map((e: { field: string }) => e.field)).toEqual(['--idempotency-key']);
    const listed = await runCli(['webhook-endpoints', 'list', '--tenant', tenant], env);
    expect(listed.stdout).toContain(id);
    expect(listed.stdout.trim().split('\n')).toHaveLength(1);
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
