import { statSync } from 'node:fs';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, WorkflowNotFoundError } from '@temporalio/client';
import { NativeConnection, Worker, bundleWorkflowCode, type WorkerOptions, type WorkflowBundleOption } from '@temporalio/worker';
import {
  createHoldSweeperActivities,
  createLedgerActivities,
  createProviderActivities,
  createRefundActivities,
  type LedgerActivityHooks,
  type ProviderActivityHooks,
  type RefundActivityHooks,
  type WorkflowRunningProbe,
} from '../../activities/index.js';
import { clientDataConverter, workerDataConverter } from '../codec/data-converter.js';
import { workerIdentity } from '../codec/key-advertisement.js';
import { payloadProtectionFromEnvironment, type PayloadProtection } from '../codec/payload-protection.js';
import { chargeTaskQueue } from '../../workflows/definitions.js';
import type { LedgerPool } from '../ledger/pool.js';
import type { ProviderConnectors } from '../providers/connectors.js';
import { ensureHoldSweeperSchedule, type HoldSweeperScheduleOptions } from './hold-sweeper-schedule.js';
import { assertChargeSearchAttributes } from './search-attributes-check.js';
import { defaultStickyScheduleToStartMs } from '../../workflows/task-timeouts.js';

/** Where the build (build/build.ts) puts things, relative to its output folder. */
export const compiledLayout = {
  workflowsIndex: 'workflows/index.js',
  workflowBundle: 'workflow-bundle.js',
} as const;

// Under tsx this module is src/worker/charge-worker.ts; in a build it is <out>/src/worker/charge-worker.js.
const compiled = import.meta.url.endsWith('.js');
// The repository under tsx, the build's output folder in a build.
const codeRoot = new URL('../../', import.meta.url);

/** The workflows' entry beside this module: TypeScript sources under tsx, tsc's output in a build. */
export const workflowsPath = fileURLToPath(new URL(compiled ? compiledLayout.workflowsIndex : 'workflows/index.ts', codeRoot));

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
  /** See defaultStickyScheduleToStartMs. */
  stickyScheduleToStartMs?: number;
  /**
   * The client the hold sweeper's activities describe charge workflows with; by default one on
   * `connection`.
   */
  temporal?: Client;
  /**
   * The hold sweeper's schedule, created at start unless it exists. By default only a worker of the
   * `charges` queue creates it (workers of other queues, as tests start them, do not); false never.
   */
  holdSweeper?: HoldSweeperScheduleOptions | false;
  /**
   * Check at start that the namespace has the charge search attributes (default true): without
   * them Temporal refuses every charge's start, so the worker refuses to start instead, naming the
   * commands that register them.
   */
  checkSearchAttributes?: boolean;
  /**
   * The payload keys and plaintext policy (docs/back-door.md); by default as this process's
   * environment says (CHARGEGUARD_PAYLOAD_KEYS, _KEYS_FILE, _PLAINTEXT), which is what the service's
   * clients read too. The worker advertises them in its identity for the start-up key check.
   */
  payloadProtection?: Pick<PayloadProtection, 'ring' | 'plaintext'>;
  /**
   * The payment providers' connectors (docs/providers.md): provider charges are authorized, captured
   * and voided there, and their refunds refunded there too; none: provider charges cannot run here.
   */
  providers?: ProviderConnectors;
  providerHooks?: ProviderActivityHooks;
  /** Worker interceptors (the bench times each activity with one); none by default. */
  interceptors?: WorkerOptions['interceptors'];
}

/**
 * Modules the workflow sandbox evaluates once per worker thread and shares, instead of once per
 * workflow execution (the reusable V8 context gives every execution a fresh module cache). Only
 * pure, stateless code belongs here: the SDK deep-freezes what they export. The request
 * fingerprint module brings SHA-256 and canonical JSON with it, for the forged-start check:
 * evaluated per charge, @noble/hashes' sha2 module alone (it builds SHA-512's round constants from
 * BigInts) took about 5% of the workflow thread's time. It is named rather than the packages
 * because those declare themselves free of side effects, and the bundler drops a preload of such
 * a module as unused.
 */
export function sharedWorkflowModules(fromPath: string = workflowsPath): string[] {
  // Beside the workflows' entry: sources under tsx, tsc's output in a build.
  return [join(dirname(fromPath), '..', 'src', 'domain', `request-fingerprint${extname(fromPath)}`)];
}

/** Bundles the deterministic workflow code once, for workers that start many times (and for the build). */
export async function bundleChargeWorkflows(fromPath: string = workflowsPath): Promise<{ code: string }> {
  return bundleWorkflowCode({ workflowsPath: fromPath, logger: quietBundlerLogger, preloadModules: sharedWorkflowModules(fromPath) });
}

/**
 * The workflow code a worker gets when the caller passes none. A build carries its workflows
 * prebundled, and a worker that loads that bundle never imports webpack: ~60 MB less resident for
 * the worker's lifetime, and seconds less to start. A bundle older than the compiled workflows
 * beside it (tsc run again without the build's bundling step) is not trusted: the worker bundles.
 */
export function defaultWorkflowSource(): { workflowBundle: WorkflowBundleOption } | { workflowsPath: string } {
  if (!compiled) return { workflowsPath };
  const bundlePath = fileURLToPath(new URL(compiledLayout.workflowBundle, codeRoot));
  const bundleMs = statSync(bundlePath, { throwIfNoEntry: false })?.mtimeMs;
  if (bundleMs !== undefined && bundleMs >= statSync(workflowsPath).mtimeMs) return { workflowBundle: { codePath: bundlePath } };
  if (bundleMs !== undefined) console.warn(`${bundlePath} is older than ${workflowsPath}: bundling the workflows at start`);
  return { workflowsPath };
}

/** A prebuilt bundle carries its shared modules (bundleChargeWorkflows); a bundle made at start is told them. */
function workflowSource(prebuilt: WorkflowBundleOption | undefined): Pick<WorkerOptions, 'workflowBundle' | 'workflowsPath' | 'bundlerOptions'> {
  const source = prebuilt ? { workflowBundle: prebuilt } : defaultWorkflowSource();
  return 'workflowsPath' in source ? { ...source, bundlerOptions: { preloadModules: sharedWorkflowModules(source.workflowsPath) } } : source;
}

/** The workflow bundler's logger: only its warnings and errors are worth a line. */
export const quietBundlerLogger = {
  log: () => {},
  trace: () => {},
  debug: () => {},
  info: () => {},
  warn: (message: string) => console.warn(message),
  error: (message: string) => console.error(message),
};

/** The one question the hold sweeper's activities may ask Temporal. */
function workflowRunningProbe(temporal: Client): WorkflowRunningProbe {
  return async (workflowId) => {
    try {
      return (await temporal.workflow.getHandle(workflowId).describe()).status.name === 'RUNNING';
    } catch (error) {
      if (error instanceof WorkflowNotFoundError) return false;
      throw error;
    }
  };
}

export async function createChargeWorker(options: ChargeWorkerOptions): Promise<Worker> {
  const taskQueue = options.taskQueue ?? chargeTaskQueue;
  if (options.checkSearchAttributes !== false) await assertChargeSearchAttributes(options.connection, options.namespace);
  const protection = options.payloadProtection ?? payloadProtectionFromEnvironment();
  const temporal = options.temporal ?? new Client({ connection: options.connection, namespace: options.namespace, dataConverter: clientDataConverter(protection) });
  const sweeper = options.holdSweeper ?? (taskQueue === chargeTaskQueue ? {} : false);
  if (sweeper !== false) await ensureHoldSweeperSchedule(temporal, { taskQueue, ...sweeper });
  const providerActivities = createProviderActivities(options.ledger, options.providers ?? {}, options.providerHooks);
  return Worker.create({
    connection: options.connection,
    namespace: options.namespace,
    taskQueue,
    // What the worker cannot decode reaches the workflow as the undecodable-payload value.
    dataConverter: workerDataConverter(protection),
    identity: workerIdentity(protection),
    ...workflowSource(options.workflowBundle),
    activities: {
      ...createLedgerActivities(options.ledger, options.hooks),
      ...createRefundActivities(options.ledger, options.refundHooks, options.providers),
      ...createHoldSweeperActivities(options.ledger, workflowRunningProbe(temporal), providerActivities.voidAtProvider),
      ...providerActivities,
    },
    maxConcurrentActivityTaskExecutions: options.maxConcurrentActivityTaskExecutions ?? 100,
    maxConcurrentWorkflowTaskExecutions: options.maxConcurrentWorkflowTaskExecutions ?? 100,
    // A charge with automatic capture finishes in one workflow task (local activities), so the
    // cache only helps manual-capture holds waiting for capture, and each cached one costs the
    // worker ~0.2 MB. Evicting them costs a replay of ~15 events when their capture comes. The
    // bench's M1 (1,000 holds waiting) measured 433 MB of RSS at 2,000, 328 MB at 100.
    maxCachedWorkflows: options.maxCachedWorkflows ?? 100,
    stickyQueueScheduleToStartTimeout: options.stickyScheduleToStartMs ?? defaultStickyScheduleToStartMs,
    ...(options.interceptors === undefined ? {} : { interceptors: options.interceptors }),
  });
}
