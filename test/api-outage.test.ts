import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApi } from '../src/api/app.js';
import { ChargeClient } from '../src/client/charge-client.js';
import { loadConfig } from '../src/config.js';
import { createLedgerPool } from '../src/ledger/pool.js';
import type { AppContext } from '../src/runtime/app-context.js';
import { findFreePort } from '../src/stack/free-port.js';
import { startTemporalDevServer, type TemporalDevServer } from '../src/stack/temporal-dev-server.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  newKey,
  newTenant,
  openAccount,
  openHarness,
  startTestWorker,
  testPolicy,
  type Harness,
} from './support/harness.js';
import { openTestApi, send } from './api-support.js';

let h: Harness;
beforeAll(async () => {
  h = await openHarness();
});
afterAll(async () => {
  await h?.close();
});

describe('503 when a dependency is unreachable, and nothing half-done', () => {
  it('Temporal stopped mid-test: 503 + Retry-After; restarted: the same key completes exactly once', async () => {
    const tenant = newTenant('outage');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');

    // A Temporal server of this test's own, so stopping it disturbs no other test.
    const dir = await mkdtemp(join(tmpdir(), 'chargeguard-outage-'));
    const serverOptions = { dbFilePath: join(dir, 'temporal.sqlite'), port: await findFreePort(), uiPort: null };
    let server: TemporalDevServer | null = await startTemporalDevServer(serverOptions);
    const worker = await startTestWorker({ taskQueue: 'charges', pool: h.pool, temporalAddress: server.address });
    const api = await openTestApi({ temporalAddress: server.address, temporalCallTimeoutMs: 5_000, retryAfterSeconds: 2 });
    try {
      const apiKey = await api.keyFor(tenant);
      const before = chargeBody({ amount: 1_000 });
      const beforeKey = newKey('before');
      const first = await api.request('/v1/charges', { apiKey, body: before, headers: { 'idempotency-key': beforeKey } });
      expect(first.status).toBe(201);

      await server.stop();
      server = null;

      const duringKey = newKey('during');
      const during = chargeBody({ amount: 2_000 });
      const refusedAtMs = Date.now();
      const refused = await api.request('/v1/charges', { apiKey, body: during, headers: { 'idempotency-key': duringKey } });
      const refusedAfterMs = Date.now() - refusedAtMs;
      expect(refused.status).toBe(503);
      // Bounded by the client's start timeout, not by the gRPC client's own ~20 s of reconnecting.
      expect(refusedAfterMs).toBeLessThan(15_000);
      expect(refused.headers.get('retry-after')).toBe('2');
      expect(refused.body).toMatchObject({ type: 'service_unavailable', dependency: 'temporal' });
      expect(refused.body.detail).toMatch(/same idempotency key/);
      const ready = await api.request('/readyz');
      expect(ready.status).toBe(503);
      expect(ready.body.checks.database).toBe('ok');
      expect(ready.body.checks.temporal).not.toBe('ok');
      expect(await captureCount(h.pool, tenant, duringKey)).toBe(0);

      server = await startTemporalDevServer(serverOptions);

      const retried = await api.request('/v1/charges', { apiKey, body: during, headers: { 'idempotency-key': duringKey } });
      expect(retried.status).toBe(201);
      expect(retried.body).toMatchObject({ status: 'succeeded', amount_captured: 2_000 });
      const replay = await api.request('/v1/charges', { apiKey, body: during, headers: { 'idempotency-key': duringKey } });
      expect(replay.status).toBe(200);
      expect(replay.text).toBe(retried.text);
      const beforeReplay = await api.request('/v1/charges', { apiKey, body: before, headers: { 'idempotency-key': beforeKey } });
      expect(beforeReplay.status).toBe(200);
      expect(beforeReplay.text).toBe(first.text);
      expect((await api.request('/readyz')).status).toBe(200);

      expect(await captureCount(h.pool, tenant, duringKey)).toBe(1);
      expect(await captureCount(h.pool, tenant, beforeKey)).toBe(1);
      expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 3_000);
    } finally {
      await api.close();
      await worker.stop();
      await server?.stop();
      await rm(dir, { recursive: true, force: true });
    }
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('PostgreSQL unreachable: 503 naming the database, not a 401 or a 500', async () => {
    const tenant = newTenant('nodb');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 1_000 });
    await openAccount(h.pool, tenant, 'payee');
    const goodApi = await openTestApi();
    const apiKey = await goodApi.keyFor(tenant);
    await goodApi.close();

    // The same API in front of a database address where nothing listens.
    const config = loadConfig({});
    const deadDatabaseUrl = `postgres://postgres:postgres@127.0.0.1:${await findFreePort()}/chargeguard`;
    const ledger = createLedgerPool({ databaseUrl: deadDatabaseUrl, connectTimeoutMs: 1_000 });
    const connection = await Connection.connect({ address: h.connection.options.address });
    const temporal = new Client({ connection, namespace: 'default' });
    const context: AppContext = {
      config,
      endpoints: { temporalAddress: h.connection.options.address!, databaseUrl: deadDatabaseUrl },
      temporal,
      ledger,
      charges: new ChargeClient({ temporal, ledger, policy: testPolicy, amountMinorMax: config.CHARGE_AMOUNT_MINOR_MAX, waitBudgetMs: 5_000 }),
      close: async () => {
        await connection.close();
        await ledger.end();
      },
    };
    const app = await buildApi({ context });
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const address = app.server.address() as { port: number };
      const baseUrl = `http://127.0.0.1:${address.port}`;
      const key = newKey();
      const charge = await send(baseUrl, '/v1/charges', { apiKey, body: chargeBody(), headers: { 'idempotency-key': key } });
      expect(charge.status).toBe(503);
      expect(charge.headers.get('retry-after')).toBe('1');
      expect(charge.body).toMatchObject({ type: 'service_unavailable', dependency: 'database' });
      const account = await send(baseUrl, '/v1/accounts/payer', { apiKey });
      expect(account.status).toBe(503);
      const ready = await send(baseUrl, '/readyz');
      expect(ready.status).toBe(503);
      expect(ready.body.checks.temporal).toBe('ok');
      expect((await send(baseUrl, '/healthz')).status).toBe(200);
      expect(await captureCount(h.pool, tenant, key)).toBe(0);
    } finally {
      await app.close();
      await context.close();
    }
    await expectLedgerInvariants(h.pool, tenant);
  });
});
