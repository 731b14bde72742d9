import { fileURLToPath } from 'node:url';
import { NativeConnection, Worker, bundleWorkflowCode, type WorkflowBundleOption } from '@temporalio/worker';
import {
  createLedgerActivities,
  createRefundActivities,
  type LedgerActivityHooks,
  type RefundActivityHooks,
} from '../../activities/index.js';
import { chargeTaskQueue } from '../../workflows/definitions.js';
import type { LedgerPool } from '../ledger/pool.js';

export const workflowsPath = fileURLToPath(new URL('../../workflows/index.ts', import.meta.url));

export interface ChargeWorkerOptions {
  connection: NativeConnection;
  namespace: string;
  ledger: LedgerPool;
  taskQueue?: string;
  /** A prebuilt bundle (tests and benchmarks bundle once); by default the workflows are bundled at start. */
  workflowBundle?: WorkflowBundleOption;
  hooks?: LedgerActivityHooks;
  refundHooks?: RefundActivityHooks;
  maxConcurrentActivityTaskExecutions?: number;
  maxConcurrentWorkflowTaskExecutions?: number;
  maxCachedWorkflows?: number;
}

/** Bundles the deterministic workflow code once, for workers that start many times. */
export async function bundleChargeWorkflows(): Promise<{ code: string }> {
  return bundleWorkflowCode({ workflowsPath, logger: quietBundlerLogger });
}

const quietBundlerLogger = {
  log: () => {},
  trace: () => {},
  debug: () => {},
  info: () => {},
  warn: (message: string) => console.warn(message),
  error: (message: string) => console.error(message),
};

export async function createChargeWorker(options: ChargeWorkerOptions): Promise<Worker> {
  return Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue: options.taskQueue ?? chargeTaskQueue,
    ...(options.workflowBundle ? { workflowBundle: options.workflowBundle } : { workflowsPath }),
    activities: {
      ...createLedgerActivities(options.ledger, options.hooks),
      ...createRefundActivities(options.ledger, options.refundHooks),
    },
    maxConcurrentActivityTaskExecutions: options.maxConcurrentActivityTaskExecutions ?? 100,
    maxConcurrentWorkflowTaskExecutions: options.maxConcurrentWorkflowTaskExecutions ?? 100,
    // A charge with automatic capture finishes in one workflow task (local activities), so the
    // cache only helps manual-capture holds waiting for capture, and each cached one costs the
    // worker ~0.2 MB. Evicting them costs a replay of ~15 events when their capture comes. The
    // bench's M1 (1,000 holds waiting) measured 433 MB of RSS at 2,000, 328 MB at 100.
    maxCachedWorkflows: options.maxCachedWorkflows ?? 100,
  });
}
