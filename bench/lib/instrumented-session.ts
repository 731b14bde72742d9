import { Client } from '@temporalio/client';
import { NativeConnection, type Worker } from '@temporalio/worker';
import { clientDataConverter } from '../../src/codec/data-converter.js';
import { payloadProtectionFromEnvironment } from '../../src/codec/payload-protection.js';
import { limits } from '../../src/domain/limits.js';
import { createLedgerPool, type LedgerPool } from '../../src/ledger/pool.js';
import { ChargeService } from '../../src/service/charge-service.js';
import { createChargeWorker } from '../../src/worker/charge-worker.js';
import type { BenchStack } from './bench-stack.js';
import type { ChargeTimeline } from './charge-timeline.js';
import { benchPolicy } from './session.js';
import { stepBatchLimitsFromEnvironment, type WorkerTuning } from './workers.js';

/** How long one charge call may wait, as the bench session's: a charge slower than this counts as failed. */
const chargeWaitBudgetMs = 30_000;
/** The service's own pool, as the bench session's (account checks and the key's row before each start). */
const servicePoolMaxConnections = 16;

/**
 * The bench session's charge path (an in-process charge worker, eager start on the worker's
 * connection, ChargeService with the bench policy) with its insides open to a sampler: the Worker
 * (its status), the worker's ledger pool (its counts and step batchers) and interceptors that mark
 * each charge's start call and steps on `timeline`. No baseline worker: nothing here compares with it.
 */
export interface InstrumentedSession {
  worker: Worker;
  /** The worker's ledger pool, which Try and Confirm (and their batchers) go through. */
  workerLedger: LedgerPool;
  temporal: Client;
  charges: ChargeService;
  close(): Promise<void>;
}

export async function openInstrumentedSession(
  stack: BenchStack,
  options: { taskQueue: string; chargeBundlePath: string; tuning: WorkerTuning; timeline: ChargeTimeline },
): Promise<InstrumentedSession> {
  const connection = await NativeConnection.connect({ address: stack.temporalAddress });
  const workerLedger = createLedgerPool({
    databaseUrl: stack.databaseUrl,
    maxConnections: options.tuning.ledgerPoolMaxConnections,
    // As the bench's own workers: LEDGER_STEP_BATCH_* price batching here too.
    ...stepBatchLimitsFromEnvironment(),
  });
  const serviceLedger = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: servicePoolMaxConnections });
  const closeAll = async (): Promise<void> => {
    await connection.close();
    await Promise.allSettled([workerLedger.end(), serviceLedger.end()]);
  };
  let worker: Worker;
  try {
    worker = await createChargeWorker({
      connection,
      namespace: 'default',
      ledger: workerLedger,
      taskQueue: options.taskQueue,
      workflowBundle: { codePath: options.chargeBundlePath },
      maxConcurrentWorkflowTaskExecutions: options.tuning.maxConcurrentWorkflowTaskExecutions,
      maxConcurrentActivityTaskExecutions: options.tuning.maxConcurrentActivityTaskExecutions,
      maxCachedWorkflows: options.tuning.maxCachedWorkflows,
      interceptors: { activity: [options.timeline.activityInterceptor()] },
    });
  } catch (error) {
    await closeAll();
    throw error;
  }
  const running = worker.run();
  const temporal = new Client({
    connection,
    namespace: 'default',
    dataConverter: clientDataConverter(payloadProtectionFromEnvironment()),
    interceptors: { workflow: [options.timeline.clientInterceptor()] },
  });
  const charges = new ChargeService({
    temporal,
    ledger: serviceLedger,
    policy: benchPolicy,
    amountMinorMax: limits.amountMinorMaxDefault,
    waitBudgetMs: chargeWaitBudgetMs,
    taskQueue: options.taskQueue,
    eagerWorkflowStart: true,
  });
  return {
    worker,
    workerLedger,
    temporal,
    charges,
    close: async () => {
      worker.shutdown();
      await Promise.allSettled([running]);
      await closeAll();
    },
  };
}
