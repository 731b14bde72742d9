import { readFile, rm } from 'node:fs/promises';
import { connect as connectTcp, type AddressInfo, type Socket } from 'node:net';
import { createServer as createTlsServer, type Server as TlsServer, type TLSSocket } from 'node:tls';
import { Client } from '@temporalio/client';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { connectTemporalWhenReachable, openAppContext } from '../src/runtime/app-context.js';
import type { DependencyWaitLimits } from '../src/support/dependency-wait.js';
import { connectWorkerWhenReachable } from '../src/runtime/local-runtime.js';
import { temporalConnectionSecurity, type TemporalSecuritySettings } from '../src/runtime/temporal-connection.js';
import { createChargeWorker } from '../src/worker/charge-worker.js';
import { chargeBody, fundedTenant, newKey, testDataConverter, testPayloadProtection, testPayloadSettings, useHarness } from './support/harness.js';
import { makeTestPki, type TestPki } from './support/pki.js';

/**
 * A Temporal frontend that requires mTLS: a TLS-terminating proxy (node:tls) in front of the test
 * stack's dev server, which has no TLS of its own. It demands a client certificate signed by the
 * test CA and presents a server certificate for `temporal.test` signed by the same CA, so a
 * connection through it proves the client presents its certificate and verifies the server's.
 */
const h = useHarness();
const serverName = 'temporal.test';
const clientName = 'chargeguard-test-client';
const oneAttempt: DependencyWaitLimits = { initialDelayMs: 0, maxDelayMs: 0, budgetMs: 0 };

interface MtlsProxy {
  address: string;
  /** Common names of the client certificates of the sessions it accepted. */
  acceptedClients: string[];
  /** Handshakes it refused, with the reason. */
  refusedHandshakes: string[];
  close(): Promise<void>;
}

async function startMtlsProxy(pki: TestPki, upstream: string): Promise<MtlsProxy> {
  const [upstreamHost, upstreamPort] = [upstream.slice(0, upstream.lastIndexOf(':')), Number(upstream.slice(upstream.lastIndexOf(':') + 1))];
  const acceptedClients: string[] = [];
  const refusedHandshakes: string[] = [];
  const sockets = new Set<Socket>();
  const server: TlsServer = createTlsServer(
    {
      key: await readFile(pki.path('server.key')),
      cert: await readFile(pki.path('server.pem')),
      ca: await readFile(pki.path('ca.pem')),
      requestCert: true,
      rejectUnauthorized: true,
      // gRPC runs over HTTP/2, which TLS clients negotiate through ALPN.
      ALPNProtocols: ['h2'],
    },
    (client: TLSSocket) => {
      acceptedClients.push(String(client.getPeerCertificate().subject?.CN));
      const backend = connectTcp(upstreamPort, upstreamHost);
      for (const socket of [client, backend]) {
        sockets.add(socket);
        socket.once('close', () => sockets.delete(socket));
        // A closed connection on either side ends the pair; the test sees what failed from the client.
        socket.on('error', () => socket.destroy());
      }
      client.pipe(backend).pipe(client);
      client.once('close', () => backend.destroy());
      backend.once('close', () => client.destroy());
    },
  );
  server.on('tlsClientError', (error) => refusedHandshakes.push(error.message));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    acceptedClients,
    refusedHandshakes,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

let pki: TestPki;
let proxy: MtlsProxy;

beforeAll(async () => {
  pki = await makeTestPki({ serverName, clientName });
  proxy = await startMtlsProxy(pki, inject('stack').temporalAddress);
});

afterAll(async () => {
  await proxy?.close();
  if (pki) await rm(pki.dir, { recursive: true, force: true });
});

function settings(overrides: TemporalSecuritySettings = {}): TemporalSecuritySettings {
  return {
    TEMPORAL_ADDRESS: proxy.address,
    TEMPORAL_TLS_CLIENT_CERT_PATH: pki.path('client.pem'),
    TEMPORAL_TLS_CLIENT_KEY_PATH: pki.path('client.key'),
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.path('ca.pem'),
    TEMPORAL_TLS_SERVER_NAME: serverName,
    ...overrides,
  };
}

const wait = (security: ReturnType<typeof temporalConnectionSecurity>) => ({ limits: oneAttempt, log: () => {}, security });

describe('every Temporal connection the app makes uses the configured mTLS', () => {
  it('a charge runs end to end with the client Connection and the worker NativeConnection both over mTLS', { timeout: 120_000 }, async () => {
    const security = temporalConnectionSecurity(settings());
    const before = proxy.acceptedClients.length;
    const clientConnection = await connectTemporalWhenReachable(proxy.address, 'default', wait(security));
    const workerConnection = await connectWorkerWhenReachable(proxy.address, 'default', wait(security));
    try {
      const taskQueue = `mtls-${newKey('q')}`;
      const worker = await createChargeWorker({
        connection: workerConnection,
        namespace: 'default',
        ledger: h.pool,
        taskQueue,
        workflowBundle: { codePath: inject('stack').workflowBundlePath },
        payloadProtection: testPayloadProtection(),
      });
      const running = worker.run();
      try {
        const tenant = await fundedTenant(h, { label: 'mtls', payerMinor: 1_000 });
        // Only the worker behind the proxy polls this queue: the charge completes only if both connections work.
        const charges = h.clientFor({ taskQueue, temporal: new Client({ connection: clientConnection, namespace: 'default', dataConverter: testDataConverter() }) });
        const result = await charges.charge(tenant, newKey('mtls'), chargeBody({ amount: 300 }));
        expect(result.charge.status).toBe('succeeded');
      } finally {
        worker.shutdown();
        await running;
      }
    } finally {
      await workerConnection.close();
      await clientConnection.close();
    }
    const sessions = proxy.acceptedClients.slice(before);
    expect(sessions.length).toBeGreaterThanOrEqual(2);
    expect(new Set(sessions)).toEqual(new Set([clientName]));
  });

  it('openAppContext (api, mcp, CLI) reads the same variables from its config', async () => {
    const before = proxy.acceptedClients.length;
    const context = await openAppContext(loadConfig({ ...settings(), ...testPayloadSettings() } as NodeJS.ProcessEnv), {
      temporalAddress: proxy.address,
      databaseUrl: inject('stack').databaseUrl,
    });
    try {
      const described = await context.temporal.workflowService.describeNamespace({ namespace: 'default' });
      expect(described.namespaceInfo?.name).toBe('default');
    } finally {
      await context.close();
    }
    expect(proxy.acceptedClients.slice(before)).toContain(clientName);
  });

  it('without a client certificate the server refuses the handshake (client and worker)', async () => {
    const security = temporalConnectionSecurity(settings({ TEMPORAL_TLS_CLIENT_CERT_PATH: undefined, TEMPORAL_TLS_CLIENT_KEY_PATH: undefined }));
    expect(security.tls?.clientCertPair).toBeUndefined();
    const refusedBefore = proxy.refusedHandshakes.length;
    await expect(connectTemporalWhenReachable(proxy.address, 'default', wait(security))).rejects.toThrow();
    await expect(connectWorkerWhenReachable(proxy.address, 'default', wait(security))).rejects.toThrow();
    expect(proxy.refusedHandshakes.length).toBeGreaterThan(refusedBefore);
  });

  it('a client certificate from another CA is refused', async () => {
    const security = temporalConnectionSecurity(
      settings({ TEMPORAL_TLS_CLIENT_CERT_PATH: pki.path('rogue-client.pem'), TEMPORAL_TLS_CLIENT_KEY_PATH: pki.path('rogue-client.key') }),
    );
    const refusedBefore = proxy.refusedHandshakes.length;
    await expect(connectTemporalWhenReachable(proxy.address, 'default', wait(security))).rejects.toThrow();
    await expect(connectWorkerWhenReachable(proxy.address, 'default', wait(security))).rejects.toThrow();
    expect(proxy.refusedHandshakes.length).toBeGreaterThan(refusedBefore);
    expect(proxy.acceptedClients).not.toContain('rogue-client');
  });

  it('the client verifies the server: a server certificate from a CA it does not trust, or for another name, is refused', async () => {
    const before = proxy.acceptedClients.length;
    const untrusted = temporalConnectionSecurity(settings({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.path('rogue-ca.pem') }));
    await expect(connectTemporalWhenReachable(proxy.address, 'default', wait(untrusted))).rejects.toThrow();
    await expect(connectWorkerWhenReachable(proxy.address, 'default', wait(untrusted))).rejects.toThrow();
    // Without TEMPORAL_TLS_SERVER_NAME the client checks the certificate against 127.0.0.1, which it does not name.
    const wrongName = temporalConnectionSecurity(settings({ TEMPORAL_TLS_SERVER_NAME: undefined }));
    await expect(connectTemporalWhenReachable(proxy.address, 'default', wait(wrongName))).rejects.toThrow();
    await expect(connectWorkerWhenReachable(proxy.address, 'default', wait(wrongName))).rejects.toThrow();
    expect(proxy.acceptedClients.length).toBe(before);
  });
});
