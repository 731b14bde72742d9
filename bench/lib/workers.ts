import { fork, type ChildProcess } from 'node:child_process';
import { symlink, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NativeConnection, Worker } from '@temporalio/worker';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { defaultStepBatchLimits, type StepBatchLimits } from '../../src/ledger/step-batches.js';
import { terminate } from '../../src/support/child-process.js';
import { createChargeWorker } from '../../src/worker/charge-worker.js';
import { workerDataConverter } from '../../src/codec/data-converter.js';
import { payloadProtectionFromEnvironment } from '../../src/codec/payload-protection.js';
import { StripeConnector, type StripeEndpoint } from '../../src/providers/stripe/connector.js';
import { loadConfig } from '../../src/config.js';
import { startConfiguredDeliverer } from '../../src/runtime/webhook-deliverer-threaded.js';
import { baselineActivities, createProviderBaselineActivities } from '../baseline-activities.js';

/** The worker knobs the bench varies; both the charge and the baseline worker get the same ones. */
export interface WorkerTuning {
  maxConcurrentWorkflowTaskExecutions: number;
  maxConcurrentActivityTaskExecutions: number;
  maxCachedWorkflows: number;
  /** Connections of the worker's ledger pool (the activities' only I/O). */
  ledgerPoolMaxConnections: number;
}

export interface BenchWorkersConfig {
  temporalAddress: string;
  databaseUrl: string;
  chargeTaskQueue: string;
  /** null: no baseline worker (M1's dedicated worker runs charges only). */
  baselineTaskQueue: string | null;
  chargeBundlePath: string;
  baselineBundlePath: string;
  tuning: WorkerTuning;
  /**
   * A server speaking Stripe's API (the bench's simulator): both workers get a connector to it, the
   * charge worker as its `stripe` provider, the baseline worker for the provider baseline. Absent:
   * no provider, as in every scenario but P1-provider.
   */
  stripeEndpoint?: StripeEndpoint;
  /**
   * Run the webhook deliverer beside the workers, as `chargeguard worker` does by default (its own
   * pool, the configuration's settings), with loopback http allowed so it can reach the bench's
   * receiver. Absent or false: no deliverer.
   */
  webhookDelivery?: boolean;
}

/** The bench's connector: the SDK's default retries and timeouts, as `chargeguard start` builds it. */
function benchStripeConnector(endpoint: StripeEndpoint): StripeConnector {
  return new StripeConnector({ apiKey: 'sk_test_chargeguard_bench', webhookSecrets: ['whsec_chargeguard_bench'], endpoint });
}

export interface BenchWorkers {
  /** 'in-process' shares the load generator's event loop; 'process' is a child of its own. */
  placement: 'in-process' | 'process';
  /** The in-process workers' connection: a client on it can ask for eager workflow start. */
  nativeConnection: NativeConnection | null;
  /** The child's pid, for CPU and memory readings; null in process (the first child's when several). */
  pid: number | null;
  /** Every worker process's pid (empty in process): CPU is charged to all of them together. */
  pids: readonly number[];
  /** How the workers' process was started: node, its flags and the entry (or 'in the bench process'). */
  command: string;
  /** The worker process's own view of its memory (main isolate heap, external, array buffers). */
  memoryUsage(): Promise<NodeJS.MemoryUsage>;
  stop(): Promise<void>;
}

/**
 * The worker's step batching as `chargeguard worker` reads it (LEDGER_STEP_BATCH_IN_FLIGHT,
 * LEDGER_STEP_BATCH_MAX_SIZE), so a run can price batching: unset, the pool's defaults.
 */
export function stepBatchLimitsFromEnvironment(): { stepBatchLimits?: StepBatchLimits } {
  const inFlight = process.env.LEDGER_STEP_BATCH_IN_FLIGHT;
  const maxSize = process.env.LEDGER_STEP_BATCH_MAX_SIZE;
  if (inFlight === undefined && maxSize === undefined) return {};
  return {
    stepBatchLimits: {
      maxInFlight: inFlight === undefined ? defaultStepBatchLimits.maxInFlight : Number(inFlight),
      maxBatchSize: maxSize === undefined ? defaultStepBatchLimits.maxBatchSize : Number(maxSize),
    },
  };
}

/** Starts the charge worker and the baseline worker in this process. */
export async function startWorkersInProcess(config: BenchWorkersConfig): Promise<BenchWorkers> {
  const connection = await NativeConnection.connect({ address: config.temporalAddress });
  const ledger = createLedgerPool({
    databaseUrl: config.databaseUrl,
    maxConnections: config.tuning.ledgerPoolMaxConnections,
    ...stepBatchLimitsFromEnvironment(),
  });
  const stripe = config.stripeEndpoint === undefined ? null : benchStripeConnector(config.stripeEndpoint);
  const workers: Worker[] = [
    await createChargeWorker({
      connection,
      namespace: 'default',
      ledger,
      taskQueue: config.chargeTaskQueue,
      workflowBundle: { codePath: config.chargeBundlePath },
      maxConcurrentWorkflowTaskExecutions: config.tuning.maxConcurrentWorkflowTaskExecutions,
      maxConcurrentActivityTaskExecutions: config.tuning.maxConcurrentActivityTaskExecutions,
      maxCachedWorkflows: config.tuning.maxCachedWorkflows,
      ...(stripe === null ? {} : { providers: { stripe } }),
    }),
  ];
  if (config.baselineTaskQueue !== null) {
    workers.push(
      await Worker.create({
        connection,
        namespace: 'default',
        taskQueue: config.baselineTaskQueue,
        workflowBundle: { codePath: config.baselineBundlePath },
        // The same payload codec as the charge worker's: the load side encrypts both arms' inputs,
        // and the baseline pays the same codec work per payload, so the ratio prices chargeguard alone.
        dataConverter: workerDataConverter(payloadProtectionFromEnvironment()),
        activities: stripe === null ? baselineActivities : { ...baselineActivities, ...createProviderBaselineActivities(stripe) },
        maxConcurrentWorkflowTaskExecutions: config.tuning.maxConcurrentWorkflowTaskExecutions,
        maxConcurrentActivityTaskExecutions: config.tuning.maxConcurrentActivityTaskExecutions,
        maxCachedWorkflows: config.tuning.maxCachedWorkflows,
      }),
    );
  }
  const running = workers.map((worker) => worker.run());
  const deliverer = config.webhookDelivery ? await startBenchDeliverer(config.databaseUrl) : null;
  let stopping: Promise<void> | null = null;
  return {
    placement: 'in-process',
    nativeConnection: connection,
    pid: null,
    pids: [],
    command: 'in the bench process',
    memoryUsage: async () => process.memoryUsage(),
    stop: () =>
      (stopping ??= (async () => {
        // In the order the worker command stops: deliveries first, then the workers.
        await deliverer?.stop();
        for (const worker of workers) worker.shutdown();
        await Promise.allSettled(running);
        await connection.close();
        await ledger.end();
      })()),
  };
}

/**
 * The production deliverer (src/runtime/webhook-deliverer.ts) with the configuration's settings
 * (WEBHOOK_* from the environment, defaults otherwise), loopback http allowed: the bench's receiver
 * is on 127.0.0.1.
 */
async function startBenchDeliverer(databaseUrl: string): Promise<{ stop(): Promise<void> } | null> {
  // Its own thread, as the configuration's default, unless the environment asks for the event loop's (WEBHOOK_DELIVERY=on).
  const where = process.env.WEBHOOK_DELIVERY === 'on' ? 'on' : 'thread';
  const config = loadConfig({ ...process.env, WEBHOOK_DELIVERY: where, WEBHOOK_ALLOW_HTTP: 'on', WEBHOOK_ALLOW_LOOPBACK: 'on' });
  return startConfiguredDeliverer(config, databaseUrl, { log: (line) => process.stderr.write(`webhook deliverer: ${line}\n`) });
}

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));
const workerProcessSource = fileURLToPath(new URL('./worker-process.ts', import.meta.url));

/** One build per output folder and bench process: every session of a run starts the same code. */
const workerBuilds = new Map<string, Promise<string>>();

/**
 * Compiles the service (build/build.ts, as `npm run build` does for a deployment) and returns the
 * compiled worker-process entry. Built afresh for each run, so a stale build is never measured.
 * The build lives beside the run's workflow bundles (the run's data folder) and goes with it.
 */
function compiledWorkerProcess(config: BenchWorkersConfig): Promise<string> {
  const outDir = join(dirname(config.chargeBundlePath), 'worker-build');
  let build = workerBuilds.get(outDir);
  if (build === undefined) {
    build = (async () => {
      const startedAtMs = performance.now();
      const { buildDist } = await import('../../build/build.js');
      // The child is handed the run's workflow bundles; a second bundle in the build would go unused.
      await buildDist({ outDir, workflowBundle: false, cliHelp: false, tsconfig: join(repoRoot, 'bench', 'tsconfig.worker.json') });
      // A data folder outside the repository still resolves the repository's packages, as ESM.
      await writeFile(join(outDir, 'package.json'), '{ "type": "module" }\n');
      await symlink(join(repoRoot, 'node_modules'), join(outDir, 'node_modules'), 'dir');
      process.stderr.write(`compiled the worker for its child process in ${((performance.now() - startedAtMs) / 1000).toFixed(1)} s\n`);
      return join(outDir, relative(repoRoot, workerProcessSource).replace(/\.ts$/, '.js'));
    })();
    workerBuilds.set(outDir, build);
  }
  return build;
}

/** Messages between the bench and its worker process. */
export type WorkerProcessMessage =
  | { type: 'ready' }
  | { type: 'failed'; message: string }
  | { type: 'stopped' }
  | { type: 'memory'; usage: NodeJS.MemoryUsage };

/**
 * Node flags of a deployed worker (the worker service of docker-compose.yml; keep the two in step).
 * --optimize-for-size keeps V8's heaps (the main thread's and the workflow thread's) near their
 * live size: M1 measured 173-183 MB instead of 266-304 MB with 1,000 holds waiting, for 10-15%
 * more worker CPU per charge (27-31 ms instead of 25.5-26 ms). BENCH_WORKER_NODE_FLAGS
 * (space-separated, empty for none) replaces them for an experiment; M1 records the command the
 * worker ran with either way.
 */
export const deployedWorkerNodeFlags: readonly string[] = ['--optimize-for-size'];

function childNodeFlags(): string[] {
  const override = process.env.BENCH_WORKER_NODE_FLAGS;
  if (override === undefined) return [...deployedWorkerNodeFlags];
  return override.split(' ').filter(Boolean);
}

/**
 * Starts the same workers in a child process run the way a deployment runs its worker: compiled
 * JavaScript (under `--import tsx` the same worker is ~40 MB larger: tsx's loader thread and
 * transform caches), the deployment's Node flags and MALLOC_ARENA_MAX. The only way to read a
 * worker's own RSS.
 */
export async function startWorkersInChild(config: BenchWorkersConfig, startTimeoutMs = 120_000): Promise<BenchWorkers> {
  const entry = await compiledWorkerProcess(config);
  const nodeFlags = childNodeFlags();
  const child = fork(entry, [], {
    // Never the bench's own flags, which under tsx would load tsx's loader into the child again.
    execArgv: nodeFlags,
    env: {
      ...process.env,
      // glibc gives each thread that allocates its own arena; with Temporal core's Rust threads that
      // keeps 50-70 MB of freed memory resident (M1). Two arenas is the usual setting for such
      // processes and the Dockerfile's; an explicit value in the environment wins.
      MALLOC_ARENA_MAX: process.env.MALLOC_ARENA_MAX ?? '2',
      BENCH_WORKERS_CONFIG: JSON.stringify(config),
    },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  await waitForMessage(child, 'ready', startTimeoutMs);
  return {
    placement: 'process',
    nativeConnection: null,
    pid: child.pid ?? null,
    pids: child.pid === undefined ? [] : [child.pid],
    command: ['node', ...nodeFlags, relative(dirname(config.chargeBundlePath), entry)].join(' '),
    memoryUsage: () =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('worker process did not report its memory')), 10_000);
        const onMessage = (message: WorkerProcessMessage): void => {
          if (message.type !== 'memory') return;
          clearTimeout(timer);
          child.off('message', onMessage);
          resolve(message.usage);
        };
        child.on('message', onMessage);
        child.send({ type: 'memory' });
      }),
    stop: async () => {
      if (child.connected) child.send({ type: 'stop' });
      const stopped = await waitForMessage(child, 'stopped', 30_000).then(() => true, () => false);
      if (!stopped) await terminate(child, { signal: 'SIGTERM', graceMs: 5_000 });
    },
  };
}

/**
 * `count` worker processes polling the same task queues, as `count` replicas of the worker service
 * would: the server spreads the tasks between them. Started together; if one fails, all stop.
 */
export async function startWorkerProcesses(config: BenchWorkersConfig, count: number): Promise<BenchWorkers> {
  if (count === 1) return startWorkersInChild(config);
  const started = await Promise.allSettled(Array.from({ length: count }, () => startWorkersInChild(config)));
  const running = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failure = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failure !== undefined) {
    await Promise.allSettled(running.map((workers) => workers.stop()));
    throw failure.reason;
  }
  return {
    placement: 'process',
    nativeConnection: null,
    pid: running[0]!.pid,
    pids: running.flatMap((workers) => workers.pids),
    command: `${count} × ${running[0]!.command}`,
    // The first process's: M1 never runs on several.
    memoryUsage: () => running[0]!.memoryUsage(),
    stop: async () => {
      await Promise.allSettled(running.map((workers) => workers.stop()));
    },
  };
}

function waitForMessage(child: ChildProcess, type: WorkerProcessMessage['type'], timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => settle(new Error(`worker process sent no '${type}' within ${timeoutMs} ms`)), timeoutMs);
    const onMessage = (message: WorkerProcessMessage): void => {
      if (message.type === type) settle(null);
      else if (message.type === 'failed') settle(new Error(`worker process failed: ${message.message}`));
    };
    const onExit = (code: number | null): void => {
      settle(type === 'stopped' ? null : new Error(`worker process exited (code ${code}) before '${type}'`));
    };
    function settle(error: Error | null): void {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      if (error) reject(error);
      else resolve();
    }
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}

/** Resident set size of a process, from /proc (the kernel's figure, not the JS heap's). */
export async function residentMemoryBytes(pid: number): Promise<number> {
  const { readFile } = await import('node:fs/promises');
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = /VmRSS:\s+(\d+)\s+kB/.exec(status)?.[1];
  if (kb === undefined) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(kb) * 1024;
}
