import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { captureTotals } from '../../src/ledger/reports.js';
import { connectTemporalWhenReachable } from '../../src/runtime/app-context.js';
import type { DependencyWaitLimits } from '../../src/support/dependency-wait.js';
import { connectWorkerWhenReachable } from '../../src/runtime/local-runtime.js';
import { temporalConnectionSecurity, type TemporalSecuritySettings } from '../../src/runtime/temporal-connection.js';
import type { TemporalCluster } from '../../src/stack/temporal-cluster.js';
import { createLedgerPool, type LedgerPool } from '../../src/ledger/pool.js';
import { ChargeService } from '../../src/service/charge-service.js';
import { createChargeWorker } from '../../src/worker/charge-worker.js';
import { chargeBody, fundedTenant, newKey, testDataConverter, testPayloadProtection, testPolicy } from '../support/harness.js';
import { makeTestPki } from '../support/pki.js';
import { startChargeguardCluster } from '../../src/runtime/local-stack.js';

/**
 * The Temporal server itself (the cluster stack) with mTLS on its frontend: clients must present a
 * certificate the test CA signed, and verify the server's certificate for `temporal.test`. A
 * charge runs end to end with chargeguard's client and worker connections built from the
 * TEMPORAL_TLS_* settings; without a client certificate, or with one from another CA, or trusting
 * another CA, the connection is refused.
 */
const serverName = 'temporal.test';
const oneAttempt: DependencyWaitLimits = { initialDelayMs: 0, maxDelayMs: 0, budgetMs: 0 };

let dir: string;
let cluster: TemporalCluster;
let pool: LedgerPool;

const path = (name: string): string => join(dir, name);

beforeAll(async () => {
  const pki = await makeTestPki({ serverName, clientName: 'chargeguard-worker' });
  dir = pki.dir;
  cluster = await startChargeguardCluster({
    workDir: path('temporal'),
    postgresUrl: inject('stack').adminDatabaseUrl,
    databaseName: 'temporal_mtls',
    visibilityDatabaseName: 'temporal_mtls_visibility',
    logFilePath: path('temporal.log'),
    tls: { certPath: path('server.pem'), keyPath: path('server.key'), caPath: path('ca.pem'), serverName },
  });
  pool = createLedgerPool({ databaseUrl: inject('stack').databaseUrl, maxConnections: 4 });
}, 180_000);

afterAll(async () => {
  await pool?.end();
  await cluster?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

function settings(overrides: TemporalSecuritySettings = {}): TemporalSecuritySettings {
  return {
    TEMPORAL_ADDRESS: cluster.address,
    TEMPORAL_TLS_CLIENT_CERT_PATH: path('client.pem'),
    TEMPORAL_TLS_CLIENT_KEY_PATH: path('client.key'),
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: path('ca.pem'),
    TEMPORAL_TLS_SERVER_NAME: serverName,
    ...overrides,
  };
}

const wait = (security: ReturnType<typeof temporalConnectionSecurity>) => ({ limits: oneAttempt, log: () => {}, security });

describe('the Temporal server with mTLS on its frontend', () => {
  it('serves a charge end to end to a client and a worker that present the CA-signed certificate', { timeout: 120_000 }, async () => {
    const security = temporalConnectionSecurity(settings());
    const clientConnection = await connectTemporalWhenReachable(cluster.address, 'default', wait(security));
    const workerConnection = await connectWorkerWhenReachable(cluster.address, 'default', wait(security));
    try {
      const worker = await createChargeWorker({
        connection: workerConnection,
        namespace: 'default',
        ledger: pool,
        // The cluster project's setup runs its workers as processes and bundles nothing here.
        ...(inject('stack').workflowBundlePath ? { workflowBundle: { codePath: inject('stack').workflowBundlePath } } : {}),
        payloadProtection: testPayloadProtection(),
      });
      const running = worker.run();
      try {
        const tenant = await fundedTenant(pool, { label: 'cluster-mtls', payerMinor: 1_000 });
        const charges = new ChargeService({
          temporal: new Client({ connection: clientConnection, namespace: 'default', dataConverter: testDataConverter() }),
          ledger: pool,
          policy: testPolicy,
          amountMinorMax: 1_000_000,
          waitBudgetMs: 60_000,
        });
        const result = await charges.charge(tenant, newKey('mtls'), chargeBody({ amount: 300 }));
        expect(result.charge.status).toBe('succeeded');
        const totals = await captureTotals(pool, tenant);
        expect({ confirmed: totals.confirmedRows, debitedMinor: totals.debitedMinor }).toEqual({ confirmed: 1, debitedMinor: 300 });
      } finally {
        worker.shutdown();
        await running;
      }
    } finally {
      await workerConnection.close();
      await clientConnection.close();
    }
  });

  const refusals: Array<[string, TemporalSecuritySettings]> = [
    ['without a client certificate', { TEMPORAL_TLS_CLIENT_CERT_PATH: undefined, TEMPORAL_TLS_CLIENT_KEY_PATH: undefined }],
    ['with a client certificate from another CA', { TEMPORAL_TLS_CLIENT_CERT_PATH: 'rogue-client.pem', TEMPORAL_TLS_CLIENT_KEY_PATH: 'rogue-client.key' }],
    ['trusting another CA for the server', { TEMPORAL_TLS_SERVER_CA_CERT_PATH: 'rogue-ca.pem' }],
    ['expecting another server name', { TEMPORAL_TLS_SERVER_NAME: 'not-temporal.test' }],
  ];
  for (const [name, overrides] of refusals) {
    it(`refuses the client and the worker connection ${name}`, async () => {
      const resolved = Object.fromEntries(
        Object.entries(overrides).map(([variable, file]) => [variable, file === undefined || variable.endsWith('_NAME') ? file : path(file)]),
      );
      const security = temporalConnectionSecurity(settings(resolved));
      await expect(connectTemporalWhenReachable(cluster.address, 'default', wait(security))).rejects.toThrow();
      await expect(connectWorkerWhenReachable(cluster.address, 'default', wait(security))).rejects.toThrow();
    });
  }

  it('refuses a plaintext client', async () => {
    const security = temporalConnectionSecurity({ TEMPORAL_ADDRESS: cluster.address });
    expect(security.tls ?? null).toBeNull();
    await expect(connectTemporalWhenReachable(cluster.address, 'default', wait(security))).rejects.toThrow();
  });
});
