import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createEndpoint, deliveryCounts } from '../src/ledger/webhook-endpoints.js';
import { migrateLedger } from '../src/ledger/migrate.js';
import { closeLedgerPool, createLedgerPool, type LedgerPool } from '../src/ledger/pool.js';
import { WebhookDeliverer } from '../src/outbound/deliverer.js';
import { startLedgerPostgres } from '../src/runtime/local-stack.js';
import { ChargeService } from '../src/service/charge-service.js';
import { renderEvent } from '../src/service/events.js';
import { webhookEndpointToWire } from '../src/service/webhook-endpoints.js';
import type { EmbeddedPostgres } from '../src/stack/embedded-postgres.js';
import { findFreePort } from '../src/support/free-port.js';
import { chargeBody, fundedTenant, newKey, startTestWorker, testPolicy, useHarness, waitFor } from './support/harness.js';
import { gate, startReceiver, verifies } from './support/receivers.js';

/**
 * Deliveries across a restart of the ledger's PostgreSQL: charges made through a real worker on the
 * shared Temporal server, a real receiver on loopback, and the database stopped while deliveries are
 * on the wire. The receiver answers them 200 while the database is down, so the deliverer cannot
 * record that they were delivered; their batch's lease runs out after the restart and it is sent again.
 * Nothing may be lost; the duplicates are counted (webhook-id lets a receiver drop them).
 *
 * PostgreSQL of its own (the suite's shared one serves every other test file at the same time), with
 * its own worker, task queue and deliverer on it.
 */
const h = useHarness();

/** Requests the receiver holds until the database is down: the endpoint's in-flight bound. */
const perEndpointConcurrency = 2;

describe('webhook deliveries across a PostgreSQL restart', () => {
  it('the ledger stopped and started mid-delivery: every event delivered at least once, the duplicates counted', { timeout: 240_000 }, async () => {
    const dataRoot = await mkdtemp(join(tmpdir(), 'chargeguard-wh-pg-restart-'));
    // PostgreSQL runs as its own OS user when we are root; it must be able to enter this folder.
    await chmod(dataRoot, 0o755);
    const postgresOptions = { dataDir: join(dataRoot, 'postgres'), port: await findFreePort() };
    let postgres: EmbeddedPostgres | null = await startLedgerPostgres(postgresOptions);
    const cleanups: Array<() => Promise<void>> = [];
    try {
      await migrateLedger(postgres.databaseUrl);
      // The charges' pool and the deliverer's, apart, as a worker process has them.
      const ledger: LedgerPool = createLedgerPool({ databaseUrl: postgres.databaseUrl, maxConnections: 6, onIdleClientError: () => {} });
      const deliveryPool: LedgerPool = createLedgerPool({ databaseUrl: postgres.databaseUrl, maxConnections: 2, onIdleClientError: () => {} });
      cleanups.push(() => closeLedgerPool(ledger), () => closeLedgerPool(deliveryPool));
      const taskQueue = `wh-pg-restart-${newKey('q')}`;
      const worker = await startTestWorker({ taskQueue, pool: ledger, holdSweeper: false });
      cleanups.push(() => worker.stop());
      const charges = new ChargeService({ temporal: h.temporal, ledger, policy: testPolicy, amountMinorMax: 1_000_000_000, waitBudgetMs: 60_000, taskQueue });
      cleanups.push(async () => charges.close());

      const databaseDown = gate();
      const rx = await startReceiver((request) => (request.n <= perEndpointConcurrency ? { status: 200, hold: databaseDown.promise } : { status: 200 }));
      cleanups.push(() => rx.close());
      const tenant = await fundedTenant(ledger, { label: 'wh-pg-restart', payerMinor: 1_000_000 });
      const { endpoint, secret } = await createEndpoint(ledger, { tenant, url: rx.url, enabledEvents: ['*'], description: null }, 16);

      const log: string[] = [];
      const leaseMs = 32_000;
      const deliverer = new WebhookDeliverer({
        pool: deliveryPool,
        settings: {
          retry: { firstDelayMs: 50, maxDelayMs: 500, windowMs: 600_000 },
          disableAfterFailingMs: 3_600_000,
          leaseMs,
          concurrency: 8,
          perEndpointConcurrency,
          pollIntervalMs: 50,
          // The held requests last through the first charges and the database's stop; the response
          // timeout covers both on a slow machine. Were they given up on before the database went
          // down, the resends would be answered at once and none would be held any more.
          door: { allowHttp: true, allowLoopback: true, allowPrivate: false, connectTimeoutMs: 1_000, responseTimeoutMs: 30_000, responseMaxBytes: 4_096 },
          claimCoalesceMs: 20,
          keepAlive: { idleMs: 4_000, maxOrigins: 256 },
        },
        render: (row) => renderEvent(row),
        renderEndpoint: webhookEndpointToWire,
        onlyTenants: [tenant],
        log: (line) => log.push(line),
      });
      deliverer.start();
      cleanups.push(() => deliverer.stop());

      const charge = async (label: string) => {
        const reply = await charges.charge(tenant, newKey(label), chargeBody({ amount: 1_000 }));
        expect(reply.charge.status).toBe('succeeded');
      };
      for (let i = 0; i < 4; i += 1) await charge('before');
      await waitFor(async () => rx.inFlight() === perEndpointConcurrency, { what: 'deliveries held open by the receiver' });

      // The database goes away with deliveries on the wire; the receiver then accepts them.
      await postgres.stop();
      postgres = null;
      databaseDown.open();
      // The held requests are first attempts of one cursor batch: it is answered, and its record
      // (carried by the next take) cannot be written.
      await waitFor(async () => log.some((line) => line.includes('recording it failed')), {
        what: 'the held deliveries answered 200 while their record could not be written',
      });
      expect(log.some((line) => line.includes('claiming webhook deliveries failed'))).toBe(true);
      // What that batch sent: sent again once its lease expires after the restart.
      const sentBeforeRestart = rx.received.map((request) => String(request.headers['webhook-id']));

      postgres = await startLedgerPostgres(postgresOptions);
      for (let i = 0; i < 4; i += 1) await charge('after');

      const events = await ledger.query<{ id: string; type: string }>('SELECT id, type FROM events WHERE tenant = $1 ORDER BY seq', [tenant]);
      // The payer's deposit, then each of the 8 charges reserved and succeeded. The deposit came
      // before the endpoint was registered, so it is not the endpoint's (an endpoint gets the events
      // written after it was created); the 16 charge events are.
      expect(events.rows.map((row) => row.type)).toEqual(['deposit.credited', ...Array<string[]>(8).fill(['charge.reserved', 'charge.succeeded']).flat()]);
      const eventIds = events.rows.slice(1).map((row) => row.id);
      await waitFor(async () => (await deliveryCounts(ledger, endpoint.id)).delivered === eventIds.length, {
        what: 'every event delivered',
        timeoutMs: 90_000,
      }).catch(async (error: Error) => {
        // What the deliverer saw, for whoever reads the failure.
        const counts = await deliveryCounts(ledger, endpoint.id).catch((e: Error) => e.message);
        throw new Error(`${error.message}: ${JSON.stringify(counts)}, ${rx.received.length} requests received; deliverer log:\n${log.slice(-20).join('\n')}`);
      });
      const counts = await deliveryCounts(ledger, endpoint.id);
      expect(counts).toMatchObject({ pending: 0, failed: 0, delivered: eventIds.length });

      const receivedIds = rx.received.map((request) => String(request.headers['webhook-id']));
      // Nothing lost: every event reached the receiver, and nothing else did.
      expect(new Set(receivedIds)).toEqual(new Set(eventIds));
      expect(rx.received.every((request) => verifies(secret, request))).toBe(true);
      // The batch on the wire was sent again (its record was never written, so its cursor did not
      // move): the held ones and any of its events sent after them while the database was down,
      // each at least twice. A record that fails once more on a connection the restart broke sends
      // the batch a third time: at least once allows it; the duplicates are counted, not forbidden.
      const duplicates = receivedIds.length - new Set(receivedIds).size;
      expect(sentBeforeRestart.length).toBeGreaterThanOrEqual(perEndpointConcurrency);
      expect(duplicates).toBeGreaterThanOrEqual(sentBeforeRestart.length);
      for (const id of sentBeforeRestart) expect(receivedIds.filter((received) => received === id).length).toBeGreaterThanOrEqual(2);
      console.info(`webhook-delivery-postgres-restart: ${eventIds.length} events, ${receivedIds.length} requests received, ${duplicates} duplicates, ${counts.attempts} attempts recorded`);
    } finally {
      for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
      await postgres?.stop();
      await rm(dataRoot, { recursive: true, force: true });
    }
  });
});
