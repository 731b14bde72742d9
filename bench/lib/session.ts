import { clientDataConverter } from '../../src/codec/data-converter.js';
import { payloadProtectionFromEnvironment } from '../../src/codec/payload-protection.js';
import { Client, Connection } from '@temporalio/client';
import { ChargeService } from '../../src/service/charge-service.js';
import { limits } from '../../src/domain/limits.js';
import type { StripeEndpoint } from '../../src/providers/stripe/connector.js';
import type { ChargePolicy } from '../../workflows/definitions.js';
import type { BenchStack } from './bench-stack.js';
import { startWorkerProcesses, startWorkersInProcess, type BenchWorkers, type WorkerTuning } from './workers.js';

/** Budgets as `chargeguard start` uses them (src/config.ts defaults). */
export const benchPolicy: ChargePolicy = {
  activityStartToCloseMs: 10_000,
  tryBudgetMs: 300_000,
  confirmBudgetMs: 300_000,
  holdTtlMs: 7 * 24 * 60 * 60 * 1000,
};

/** How long one charge call of the bench may wait; a charge slower than this counts as failed. */
const chargeWaitBudgetMs = 30_000;

export interface SessionOptions {
  placement: 'in-process' | 'process';
  /** With placement 'process': how many worker processes share the task queues (1 by default). */
  workerProcesses?: number;
  tuning: WorkerTuning;
  /** Ask the server to hand the first workflow task straight back (in-process workers only). */
  eagerStart: boolean;
  /** Task queues of this session: fresh names, so no other worker (or earlier session) takes the tasks. */
  chargeTaskQueue: string;
  baselineTaskQueue: string | null;
  bundles: { chargeBundlePath: string; baselineBundlePath: string };
  /** The provider both workers talk to (P1-provider's simulator); absent: none. */
  stripeEndpoint?: StripeEndpoint;
  /** The webhook deliverer beside the workers, as a deployed worker runs it (BenchWorkersConfig.webhookDelivery). */
  webhookDelivery?: boolean;
}

/** Workers plus the clients that drive them: what a Temporal-facing scenario needs. */
export interface TemporalSession {
  options: SessionOptions;
  workers: BenchWorkers;
  temporal: Client;
  charges: ChargeService;
  /** Whether starts really go eager (asked for, and the client shares the workers' connection). */
  eagerStart: boolean;
  close(): Promise<void>;
}

export async function openTemporalSession(stack: BenchStack, options: SessionOptions): Promise<TemporalSession> {
  const config = {
    temporalAddress: stack.temporalAddress,
    databaseUrl: stack.databaseUrl,
    chargeTaskQueue: options.chargeTaskQueue,
    baselineTaskQueue: options.baselineTaskQueue,
    ...options.bundles,
    tuning: options.tuning,
    ...(options.stripeEndpoint === undefined ? {} : { stripeEndpoint: options.stripeEndpoint }),
    webhookDelivery: options.webhookDelivery ?? false,
  };
  const workers = options.placement === 'process'
    ? await startWorkerProcesses(config, options.workerProcesses ?? 1)
    : await startWorkersInProcess(config);
  try {
    const eagerStart = options.eagerStart && workers.nativeConnection !== null;
    // Eager start needs the client on the workers' own (native) connection; otherwise a plain one.
    const grpcConnection = eagerStart ? null : await Connection.connect({ address: stack.temporalAddress });
    const temporal = new Client({
      connection: workers.nativeConnection && eagerStart ? workers.nativeConnection : grpcConnection!,
      namespace: 'default',
      dataConverter: clientDataConverter(payloadProtectionFromEnvironment()),
    });
    const { createLedgerPool } = await import('../../src/ledger/pool.js');
    const ledger = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 16 });
    const charges = new ChargeService({
      temporal,
      ledger,
      policy: benchPolicy,
      amountMinorMax: limits.amountMinorMaxDefault,
      waitBudgetMs: chargeWaitBudgetMs,
      taskQueue: options.chargeTaskQueue,
      eagerWorkflowStart: eagerStart,
    });
    return {
      options,
      workers,
      temporal,
      charges,
      eagerStart,
      close: async () => {
        await grpcConnection?.close();
        await ledger.end();
        await workers.stop();
      },
    };
  } catch (error) {
    await workers.stop();
    throw error;
  }
}
