import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { describe, expect, inject, it } from 'vitest';
import {
  createEndpoint,
  deliveryCounts,
  eventsBehindCursor,
  getEndpoint,
  listAttempts,
  newEventId,
  requestRedelivery,
  rotateSecret,
} from '../src/ledger/webhook-endpoints.js';
import { Webhook } from 'standardwebhooks';
import { WebhookDeliverer, nextAttemptAt, retryDelayMs, signedHeaders, type DelivererSettings } from '../src/outbound/deliverer.js';
import { deposit } from '../src/ledger/accounts.js';
import { renderEvent } from '../src/service/events.js';
import { webhookEndpointToWire } from '../src/service/webhook-endpoints.js';
import { verifyWebhookDelivery, WebhookDeliveryRejected } from '../src/client/http/index.js';
import { newTenant, openAccount, useHarness, waitFor } from './support/harness.js';
import { gate, verifies, type Receiver } from './support/receivers.js';
import { fastDelivererSettings, stoppedAfterEach } from './support/deliverer-settings.js';

const h = useHarness();

const fast = fastDelivererSettings;

const { track, receiver } = stoppedAfterEach();

function startDeliverer(tenant: string, settings: Partial<DelivererSettings> = {}): WebhookDeliverer {
  const deliverer = new WebhookDeliverer({
    pool: h.pool,
    settings: { ...fast, ...settings },
    render: (row) => renderEvent(row),
    renderEndpoint: webhookEndpointToWire,
    onlyTenants: [tenant],
    log: () => {},
  });
  deliverer.start();
  return track(deliverer);
}

async function endpointFor(tenant: string, url: string, enabledEvents: string[] = ['*']) {
  return createEndpoint(h.pool, { tenant, url, enabledEvents, description: null }, 16);
}

const accountsOpened = new Set<string>();

/**
 * A real event: a deposit, whose deposit.credited event the ledger's outbox writer adds in the
 * deposit's transaction (and the fan-out its deliveries). Its id.
 */
async function insertEvent(tenant: string): Promise<string> {
  if (!accountsOpened.has(tenant)) {
    await openAccount(h.pool, tenant, 'wh');
    accountsOpened.add(tenant);
  }
  const made = await deposit(h.pool, tenant, 'wh', 100, `wh-${randomBytes(8).toString('hex')}`);
  const { rows } = await h.pool.query<{ id: string }>('SELECT id FROM events WHERE tenant = $1 AND object_id = $2', [tenant, `dep_${made.transferId}`]);
  expect(rows).toHaveLength(1);
  return rows[0]!.id;
}

async function deliveredCount(endpointId: string, expected: number, what: string): Promise<void> {
  await waitFor(async () => (await deliveryCounts(h.pool, endpointId)).delivered >= expected, { what, timeoutMs: 30_000 });
}

describe('the retry schedule (pure)', () => {
  const schedule = { firstDelayMs: 1_000, maxDelayMs: 60_000, windowMs: 3 * 24 * 3_600_000 };
  it('full jitter: a delay uniform in [0, min(max, first x 2^(attempt-1))]', () => {
    expect(retryDelayMs(schedule, 1, () => 0.999)).toBe(999);
    expect(retryDelayMs(schedule, 4, () => 0.5)).toBe(4_000);
    expect(retryDelayMs(schedule, 30, () => 0.5)).toBe(30_000);
    expect(retryDelayMs(schedule, 3, () => 0)).toBe(0);
  });
  it('never past the window; null once the window is over', () => {
    const created = new Date('2026-11-28T00:00:00Z');
    const nearEnd = new Date(created.getTime() + schedule.windowMs - 10);
    expect(nextAttemptAt(schedule, 20, created, nearEnd, () => 0.99)!.getTime()).toBe(created.getTime() + schedule.windowMs);
    expect(nextAttemptAt(schedule, 20, created, new Date(created.getTime() + schedule.windowMs), () => 0.5)).toBeNull();
  });
});

describe('the delivery signature (pure)', () => {
  it('node:crypto HMAC gives the very signature the standardwebhooks package makes and verifies, for each live secret', () => {
    const secrets = [`whsec_${randomBytes(32).toString('base64')}`, `whsec_${randomBytes(32).toString('base64')}`];
    const at = new Date('2026-12-02T08:00:00.123Z');
    for (const body of ['{}', JSON.stringify({ id: 'evt_1', data: { note: 'café ☕ ≠ cafe', amount: 2500 } })]) {
      const headers = signedHeaders('evt_1', secrets, body, at);
      expect(headers['webhook-timestamp']).toBe(String(Math.floor(at.getTime() / 1000)));
      expect(headers['webhook-signature']).toBe(secrets.map((secret) => new Webhook(secret).sign('evt_1', at, body)).join(' '));
      // Each secret alone verifies (a receiver holding either one, during a rotation).
      for (const secret of secrets) {
        const fresh = signedHeaders('evt_1', [secret], body, new Date());
        expect(new Webhook(secret).verify(body, fresh)).toEqual(JSON.parse(body));
      }
    }
    expect(() => signedHeaders('evt_1', [], '{}', at)).toThrow(/live signing secret/);
  });
});

describe('webhook deliveries (real receivers on loopback, the ledger as the engine)', () => {
  it('an endpoint failing 3 times then answering 200: one delivery, 4 attempts, each signed for the same webhook-id', async () => {
    const tenant = newTenant('wd-retry');
    const rx = await receiver((request) => ({ status: request.n <= 3 ? 500 : 200 }));
    const { endpoint, secret } = await endpointFor(tenant, rx.url);
    startDeliverer(tenant);
    const eventId = await insertEvent(tenant);
    await deliveredCount(endpoint.id, 1, 'the delivery');
    expect(await deliveryCounts(h.pool, endpoint.id)).toEqual({ pending: 0, delivered: 1, failed: 0, attempts: 4 });
    expect(rx.received).toHaveLength(4);
    for (const request of rx.received) {
      expect(request.headers['webhook-id']).toBe(eventId);
      expect(verifies(secret, request)).toBe(true);
      expect(JSON.parse(request.body)).toMatchObject({ id: eventId, object: 'event', type: 'deposit.credited', sequence: 1, data: { object: { object: 'deposit', amount: 100 } } });
    }
    // The typed client's helper verifies too, and refuses a body changed by one byte.
    const last = rx.received.at(-1)!;
    expect(verifyWebhookDelivery(secret, last.body, last.headers)).toMatchObject({ id: eventId, sequence: 1 });
    expect(() => verifyWebhookDelivery(secret, last.body.replace('deposit', 'dep0sit'), last.headers)).toThrow(WebhookDeliveryRejected);
    const attempts = (await listAttempts(h.pool, tenant, endpoint.id, 10))!;
    expect(attempts.map((a) => a.statusCode)).toEqual([200, 500, 500, 500]);
    expect(attempts.map((a) => a.attempt)).toEqual([4, 3, 2, 1]);
    expect(attempts.every((a) => a.deliveryState === 'delivered')).toBe(true);
  });

  it('a slow endpoint holds at most its own slots (across two deliverers): another endpoint gets all its events meanwhile', async () => {
    const tenant = newTenant('wd-slow');
    const release = gate();
    let slowMaxInFlight = 0;
    const slow = await receiver(() => ({ status: 200, hold: release.promise }));
    const quick = await receiver();
    const slowEndpoint = await endpointFor(tenant, slow.url);
    const quickEndpoint = await endpointFor(tenant, quick.url);
    const settings = { door: { ...fast.door, responseTimeoutMs: 20_000 }, leaseMs: 30_000 };
    // Two deliverers, as two worker processes: the per-endpoint bound holds across them.
    startDeliverer(tenant, settings);
    startDeliverer(tenant, settings);
    const watch = setInterval(() => (slowMaxInFlight = Math.max(slowMaxInFlight, slow.inFlight())), 5);
    try {
      for (let i = 0; i < 10; i += 1) await insertEvent(tenant);
      await deliveredCount(quickEndpoint.endpoint.id, 10, 'the quick endpoint to get all 10 events');
      // All of the quick endpoint's deliveries were made while the slow one still sat on its first ones.
      expect(quick.received).toHaveLength(10);
      expect((await deliveryCounts(h.pool, slowEndpoint.endpoint.id)).delivered).toBe(0);
      expect(slow.received.length).toBeLessThanOrEqual(fast.perEndpointConcurrency);
    } finally {
      release.open();
      clearInterval(watch);
    }
    await deliveredCount(slowEndpoint.endpoint.id, 10, 'the slow endpoint to catch up');
    expect(slowMaxInFlight).toBeLessThanOrEqual(fast.perEndpointConcurrency);
    expect(slowMaxInFlight).toBeGreaterThan(0);
  });

  it('coalesced claims (two deliverers, claimCoalesceMs 50) keep the per-endpoint bound: never more than 2 in flight, every event delivered', async () => {
    const tenant = newTenant('wd-coalesce');
    let maxInFlight = 0;
    // Each answer takes 15 ms, so attempts finish while others are in flight and their slots are refilled by coalesced claims.
    const busy: Receiver = await receiver(() => {
      maxInFlight = Math.max(maxInFlight, busy.inFlight());
      return { status: 200, hold: new Promise((done) => setTimeout(done, 15)) };
    });
    const endpoint = await endpointFor(tenant, busy.url);
    startDeliverer(tenant, { claimCoalesceMs: 50 });
    startDeliverer(tenant, { claimCoalesceMs: 50 });
    const ids: string[] = [];
    for (let i = 0; i < 20; i += 1) ids.push(await insertEvent(tenant));
    await deliveredCount(endpoint.endpoint.id, 20, 'all 20 events delivered');
    expect(new Set(busy.received.map((r) => r.headers['webhook-id']))).toEqual(new Set(ids));
    expect(maxInFlight).toBeLessThanOrEqual(fast.perEndpointConcurrency);
    expect(maxInFlight).toBeGreaterThan(0);
  });

  it('410 Gone disables the endpoint and writes webhook_endpoint.disabled in the same transaction; later events make no delivery for it', async () => {
    const tenant = newTenant('wd-gone');
    const gone = await receiver(() => ({ status: 410 }));
    const watcher = await receiver();
    const { endpoint } = await endpointFor(tenant, gone.url, ['deposit.credited']);
    const { endpoint: watching } = await endpointFor(tenant, watcher.url, ['webhook_endpoint.disabled']);
    startDeliverer(tenant);
    await insertEvent(tenant);
    const disabled = await waitFor(async () => {
      const now = await getEndpoint(h.pool, tenant, endpoint.id);
      return now?.disabledAt ? now : null;
    }, { what: 'the endpoint to be disabled' });
    expect(disabled.disabledReason).toBe('gone');
    const events = await h.pool.query('SELECT type, object_id, data FROM events WHERE tenant = $1 AND object_type = $2', [tenant, 'webhook_endpoint']);
    expect(events.rows).toEqual([
      { type: 'webhook_endpoint.disabled', object_id: endpoint.id, data: { object: expect.objectContaining({ id: endpoint.id, status: 'disabled', disabled_reason: 'gone' }) } },
    ]);
    // The other endpoint, subscribed to that type, is told.
    await deliveredCount(watching.id, 1, 'the disabled event to reach the watching endpoint');
    expect(JSON.parse(watcher.received[0]!.body)).toMatchObject({ type: 'webhook_endpoint.disabled', data: { object: { id: endpoint.id } } });
    expect(await deliveryCounts(h.pool, endpoint.id)).toMatchObject({ delivered: 0, failed: 1, pending: 0, attempts: 1 });
    await insertEvent(tenant);
    expect((await deliveryCounts(h.pool, endpoint.id)).failed + (await deliveryCounts(h.pool, endpoint.id)).pending).toBe(1);
    expect(gone.received).toHaveLength(1);
  });

  it('an endpoint failing longer than disableAfterFailingMs is disabled (reason failing), with its event', async () => {
    const tenant = newTenant('wd-failing');
    const down = await receiver(() => ({ status: 503 }));
    const { endpoint } = await endpointFor(tenant, down.url);
    startDeliverer(tenant, { disableAfterFailingMs: 300 });
    await insertEvent(tenant);
    const disabled = await waitFor(async () => {
      const now = await getEndpoint(h.pool, tenant, endpoint.id);
      return now?.disabledAt ? now : null;
    }, { what: 'the failing endpoint to be disabled' });
    expect(disabled.disabledReason).toBe('failing');
    expect(down.received.length).toBeGreaterThanOrEqual(2);
    const events = await h.pool.query('SELECT count(*)::int AS n FROM events WHERE tenant = $1 AND type = $2 AND object_id = $3', [tenant, 'webhook_endpoint.disabled', endpoint.id]);
    expect(events.rows[0].n).toBe(1);
  });

  it('a delivery still failing when its retry window is over fails for good', async () => {
    const tenant = newTenant('wd-window');
    const down = await receiver(() => ({ status: 500 }));
    const { endpoint } = await endpointFor(tenant, down.url);
    startDeliverer(tenant, { retry: { firstDelayMs: 20, maxDelayMs: 50, windowMs: 400 } });
    await insertEvent(tenant);
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).failed === 1, { what: 'the delivery to fail for good' });
    const counts = await deliveryCounts(h.pool, endpoint.id);
    expect(counts).toMatchObject({ pending: 0, delivered: 0, failed: 1 });
    expect(counts.attempts).toBe(down.received.length);
    expect(counts.attempts).toBeGreaterThanOrEqual(2);
  });

  it('rotation: during the overlap both secrets sign (two v1 signatures); after it, only the new one', async () => {
    const tenant = newTenant('wd-rotate');
    const rx = await receiver();
    const { endpoint, secret: first } = await endpointFor(tenant, rx.url);
    const rotated = (await rotateSecret(h.pool, tenant, endpoint.id, 3_600_000, 3))!;
    startDeliverer(tenant);
    await insertEvent(tenant);
    await deliveredCount(endpoint.id, 1, 'the delivery during the overlap');
    const during = rx.received[0]!;
    expect(String(during.headers['webhook-signature']).split(' ')).toHaveLength(2);
    expect(String(during.headers['webhook-signature'])).toMatch(/^v1,[A-Za-z0-9+/]+=* v1,[A-Za-z0-9+/]+=*$/);
    expect(verifies(first, during)).toBe(true);
    expect(verifies(rotated.secret, during)).toBe(true);
    // The overlap ends (as time would end it).
    await h.pool.query('UPDATE webhook_endpoint_secrets SET expires_at = now() WHERE endpoint_id = $1 AND expires_at IS NOT NULL', [endpoint.id]);
    await insertEvent(tenant);
    await deliveredCount(endpoint.id, 2, 'the delivery after the overlap');
    const after = rx.received[1]!;
    expect(String(after.headers['webhook-signature']).split(' ')).toHaveLength(1);
    expect(verifies(rotated.secret, after)).toBe(true);
    expect(verifies(first, after)).toBe(false);
    // A rotation without overlap: the newest alone, at once.
    const third = (await rotateSecret(h.pool, tenant, endpoint.id, 0, 3))!;
    await insertEvent(tenant);
    await deliveredCount(endpoint.id, 3, 'the delivery after a rotation without overlap');
    expect(verifies(third.secret, rx.received[2]!)).toBe(true);
    expect(verifies(rotated.secret, rx.received[2]!)).toBe(false);
  });

  it('an address the door refuses is never connected to: the attempt fails naming why, the receiver gets nothing', async () => {
    const tenant = newTenant('wd-refused');
    const rx = await receiver();
    // Registered while loopback was allowed; the deliverer's door now refuses it (checked at each delivery).
    const { endpoint } = await endpointFor(tenant, rx.url);
    startDeliverer(tenant, { door: { ...fast.door, allowLoopback: false } });
    await insertEvent(tenant);
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).attempts >= 2, { what: 'two refused attempts' });
    const attempts = (await listAttempts(h.pool, tenant, endpoint.id, 5))!;
    expect(attempts[0]).toMatchObject({ statusCode: null, delivered: false, error: expect.stringMatching(/127\.0\.0\.1 is a loopback address/) });
    expect(rx.received).toHaveLength(0);
  });

  it('a redirect is not followed: a 3xx is a failed attempt and its Location gets nothing', async () => {
    const tenant = newTenant('wd-redirect');
    const target = await receiver();
    const redirecting = await receiver(() => ({ status: 307, headers: { location: target.url } }));
    const { endpoint } = await endpointFor(tenant, redirecting.url);
    startDeliverer(tenant);
    await insertEvent(tenant);
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).attempts >= 2, { what: 'two attempts' });
    const attempts = (await listAttempts(h.pool, tenant, endpoint.id, 5))!;
    expect(attempts[0]).toMatchObject({ statusCode: 307, delivered: false, error: 'redirect (307) not followed' });
    expect(target.received).toHaveLength(0);
  });

  it("tenant isolation: a tenant's events reach only its own endpoints, whatever they subscribe to", async () => {
    const [a, b] = [newTenant('wd-iso-a'), newTenant('wd-iso-b')];
    const rxA = await receiver();
    const rxB = await receiver();
    const { endpoint: endpointA } = await endpointFor(a, rxA.url, ['*']);
    const { endpoint: endpointB } = await endpointFor(b, rxB.url, ['*']);
    startDeliverer(a);
    startDeliverer(b);
    const eventA = await insertEvent(a);
    const eventB = await insertEvent(b);
    await deliveredCount(endpointA.id, 1, "a's delivery");
    await deliveredCount(endpointB.id, 1, "b's delivery");
    expect(rxA.received.map((r) => r.headers['webhook-id'])).toEqual([eventA]);
    expect(rxB.received.map((r) => r.headers['webhook-id'])).toEqual([eventB]);
    // Rows are written when each cursor's batch is recorded, in whichever order they answered.
    const rows = await h.pool.query('SELECT endpoint_id, event_id FROM webhook_deliveries WHERE tenant = ANY($1) ORDER BY array_position($1, tenant)', [[a, b]]);
    expect(rows.rows).toEqual([
      { endpoint_id: endpointA.id, event_id: eventA },
      { endpoint_id: endpointB.id, event_id: eventB },
    ]);
    // Asking to send another tenant's event is refused by the ledger query itself.
    expect(await requestRedelivery(h.pool, a, endpointA.id, eventB)).toBe('event');
    expect(await requestRedelivery(h.pool, b, endpointA.id, eventB)).toBe('endpoint');
  });

  it('only subscribed types make deliveries, and a requested redelivery sends the event again with the same webhook-id', async () => {
    const tenant = newTenant('wd-types');
    const rx = await receiver();
    const other = await receiver();
    const { endpoint } = await endpointFor(tenant, rx.url, ['deposit.credited']);
    const { endpoint: charges } = await endpointFor(tenant, other.url, ['charge.succeeded', 'refund.succeeded']);
    startDeliverer(tenant);
    const depositEvent = await insertEvent(tenant);
    await deliveredCount(endpoint.id, 1, 'the deposit event');
    const again = await requestRedelivery(h.pool, tenant, endpoint.id, depositEvent);
    expect(again).toMatchObject({ deliveryId: expect.any(Number) });
    await deliveredCount(endpoint.id, 2, 'the redelivery');
    expect(rx.received.map((r) => r.headers['webhook-id'])).toEqual([depositEvent, depositEvent]);
    // The endpoint subscribed to other types got no delivery at all.
    expect(await deliveryCounts(h.pool, charges.id)).toEqual({ pending: 0, delivered: 0, failed: 0, attempts: 0 });
    expect(other.received).toHaveLength(0);
  });

  it('a deliverer process killed (SIGKILL) mid-delivery: its lease expires, the next process delivers; the duplicate is counted and allowed', async () => {
    const tenant = newTenant('wd-kill');
    const firstArrived = gate();
    const never = new Promise<void>(() => {});
    // The first request is held open until the process that sent it is dead; later ones answer 200.
    const rx = await receiver((request) => {
      if (request.n === 1) {
        firstArrived.open();
        return { status: 200, hold: never };
      }
      return { status: 200 };
    });
    const { endpoint, secret } = await endpointFor(tenant, rx.url);
    const leaseMs = 3_000;
    const spawnDeliverer = () =>
      startProcess({
        DELIVER_TENANT: tenant,
        WEBHOOK_ALLOW_HTTP: 'true',
        WEBHOOK_ALLOW_LOOPBACK: 'true',
        WEBHOOK_DELIVERY_LEASE_MS: String(leaseMs),
        WEBHOOK_CONNECT_TIMEOUT_MS: '1000',
        WEBHOOK_RESPONSE_TIMEOUT_MS: '1500',
        WEBHOOK_RETRY_FIRST_DELAY_MS: '20',
        WEBHOOK_RETRY_MAX_DELAY_MS: '100',
        WEBHOOK_DELIVERY_POLL_MS: '20',
      });
    const first = await spawnDeliverer();
    const eventId = await insertEvent(tenant);
    await firstArrived.promise;
    const killedAt = Date.now();
    first.kill('SIGKILL');
    await new Promise((resolve) => first.once('exit', resolve));
    // Nothing was recorded: the attempt died with its process; the cursor has not passed the event,
    // and its lease (the dead process's) is still held.
    expect(await deliveryCounts(h.pool, endpoint.id)).toEqual({ pending: 0, delivered: 0, failed: 0, attempts: 0 });
    expect(await eventsBehindCursor(h.pool, endpoint.id)).toBe(1);
    const lease = await h.pool.query('SELECT cursor_owner IS NOT NULL AS held, cursor_lease_expires_at > now() AS live FROM webhook_endpoints WHERE id = $1', [endpoint.id]);
    expect(lease.rows[0]).toEqual({ held: true, live: true });
    await startProcess({ ...(first as ChildProcessWithEnv).env, DELIVER_TENANT: tenant });
    await deliveredCount(endpoint.id, 1, 'the delivery after the restart');
    const second = rx.received.find((r) => r.n === 2)!;
    // Not before the dead process's lease ran out.
    expect(second.at - killedAt).toBeGreaterThanOrEqual(leaseMs - 1_000);
    expect(rx.received.map((r) => r.headers['webhook-id'])).toEqual([eventId, eventId]);
    expect(rx.received.every((r) => verifies(secret, r))).toBe(true);
    const counts = await deliveryCounts(h.pool, endpoint.id);
    expect(counts).toEqual({ pending: 0, delivered: 1, failed: 0, attempts: 1 });
    expect(await eventsBehindCursor(h.pool, endpoint.id)).toBe(0);
    // What the receiver saw: 2 requests for 1 event, 1 duplicate, which webhook-id lets it drop.
    expect(rx.received.length - new Set(rx.received.map((r) => r.headers['webhook-id'])).size).toBe(1);
  });
});

type ChildProcessWithEnv = ChildProcess & { env: Record<string, string> };

/** The deliverer fixture as its own process, stopped after the test. */
async function startProcess(env: Record<string, string>): Promise<ChildProcessWithEnv> {
  const stack = inject('stack');
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/webhook-deliverer-process.ts'], {
    env: { ...process.env, DATABASE_URL: stack.databaseUrl, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  }) as ChildProcessWithEnv;
  child.env = env;
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  track({
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await new Promise((resolve) => child.once('exit', resolve));
      }
    },
  });
  await waitFor(async () => output.includes('deliverer ready'), { timeoutMs: 60_000, what: 'the deliverer process to start' });
  return child;
}
