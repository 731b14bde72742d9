import { randomBytes } from 'node:crypto';
import { describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { deposit } from '../src/ledger/accounts.js';
import { createEndpoint, deliveryCounts } from '../src/ledger/webhook-endpoints.js';
import { startWebhookDelivererThread } from '../src/runtime/webhook-deliverer-threaded.js';
import { newTenant, openAccount, useHarness, waitFor } from './support/harness.js';
import { verifies } from './support/receivers.js';
import { stoppedAfterEach } from './support/deliverer-settings.js';

/**
 * The worker's deliverer on a thread of its own (WEBHOOK_DELIVERY=thread, the default): the same
 * deliverer as in-line, started and stopped across a thread boundary, its configuration carried over.
 */
const h = useHarness();
const { track, receiver } = stoppedAfterEach();

const threadConfig = () =>
  loadConfig({
    WEBHOOK_ALLOW_HTTP: 'on',
    WEBHOOK_ALLOW_LOOPBACK: 'on',
    WEBHOOK_DELIVERY_POLL_MS: '20',
    WEBHOOK_DELIVERY_CLAIM_COALESCE_MS: '20',
  });

describe('the deliverer on its own thread', () => {
  it('is where a worker delivers unless told otherwise; on (the event loop) and off remain', () => {
    expect(loadConfig({}).WEBHOOK_DELIVERY).toBe('thread');
    expect(loadConfig({ WEBHOOK_DELIVERY: 'on' }).WEBHOOK_DELIVERY).toBe('on');
    expect(loadConfig({ WEBHOOK_DELIVERY: 'off' }).WEBHOOK_DELIVERY).toBe('off');
    expect(() => loadConfig({ WEBHOOK_DELIVERY: 'elsewhere' })).toThrow(/WEBHOOK_DELIVERY/);
  });

  it('delivers every event once, signed, and stops when asked', async () => {
    const tenant = newTenant('wh-thread');
    await openAccount(h.pool, tenant, 'wh');
    const rx = await receiver();
    const { endpoint, secret } = await createEndpoint(h.pool, { tenant, url: rx.url, enabledEvents: ['*'], description: null }, 16);
    const lines: string[] = [];
    const running = track(await startWebhookDelivererThread(threadConfig(), inject('stack').databaseUrl, { log: (line) => lines.push(line), onlyTenants: [tenant] }));
    const eventCount = 5;
    for (let i = 0; i < eventCount; i++) await deposit(h.pool, tenant, 'wh', 100, `wh-thread-${randomBytes(8).toString('hex')}`);
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).delivered >= eventCount, { what: 'the thread delivering every event', timeoutMs: 30_000 });
    const ids = rx.received.map((r) => r.headers['webhook-id']);
    expect(new Set(ids).size).toBe(eventCount);
    expect(rx.received.every((r) => verifies(secret, r))).toBe(true);
    await running.stop();
    expect(lines.filter((line) => /thread/.test(line))).toEqual([]);
  });

  it('a thread that dies is started again, and deliveries go on', async () => {
    const tenant = newTenant('wh-thread-dies');
    await openAccount(h.pool, tenant, 'wh');
    const rx = await receiver();
    const { endpoint } = await createEndpoint(h.pool, { tenant, url: rx.url, enabledEvents: ['*'], description: null }, 16);
    const lines: string[] = [];
    const running = track(await startWebhookDelivererThread(threadConfig(), inject('stack').databaseUrl, { log: (line) => lines.push(line), onlyTenants: [tenant] }));
    await deposit(h.pool, tenant, 'wh', 100, `wh-thread-${randomBytes(8).toString('hex')}`);
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).delivered >= 1, { what: 'the first thread delivering', timeoutMs: 30_000 });
    const first = running.currentThread();
    expect(first).not.toBeNull();
    // What an uncaught error in the thread comes to: the thread ends without being asked.
    await first!.terminate();
    await waitFor(async () => running.currentThread() !== null && running.currentThread() !== first, { what: 'a new thread', timeoutMs: 30_000 });
    expect(lines.some((line) => /thread exited \(code \d+\); starting it again in 1000 ms/.test(line))).toBe(true);
    await deposit(h.pool, tenant, 'wh', 100, `wh-thread-${randomBytes(8).toString('hex')}`);
    await waitFor(async () => (await deliveryCounts(h.pool, endpoint.id)).delivered >= 2, { what: 'the new thread delivering', timeoutMs: 30_000 });
    expect(new Set(rx.received.map((r) => r.headers['webhook-id'])).size).toBe(2);
    await running.stop();
  });
});
