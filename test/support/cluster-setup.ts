import { execFileSync } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { migrateLedger } from '../../src/ledger/migrate.js';
import {
  apiReadyLine,
  startChargeguardProcess,
  workerReadyLine,
  type ChargeguardProcess,
  type CliInvocation,
} from '../../src/stack/chargeguard-processes.js';
import { ensurePayloadKeyFile } from '../../src/codec/payload-key-file.js';
import { generousRateLimits } from './api.js';
import { startChargeguardStack } from '../../src/runtime/local-stack.js';

/** The production shape the cluster tests run against, beside the `stack` the harness reads. */
export interface TestCluster {
  /** One URL per API process, each its own Node process. */
  apiUrls: string[];
  /** One per worker process (`chargeguard worker`), for tests that kill one. */
  workers: Array<{ name: string; pid: number }>;
  /** How the worker processes were started, for a test that starts one more. */
  cli: CliInvocation;
  workerEnv: Record<string, string>;
  logsDir: string;
}

declare module 'vitest' {
  export interface ProvidedContext {
    cluster: TestCluster;
  }
}

const workerCount = 2;
const apiCount = 2;
/** A worker bundles the workflows with webpack at start: tens of seconds on a busy 2-core machine. */
const processStartTimeoutMs = 120_000;
const processStopTimeoutMs = 15_000;

/**
 * The cluster project's stack: embedded PostgreSQL, the real Temporal server on it
 * (src/stack/temporal-cluster.ts), the migrated ledger, and chargeguard as deployed: two
 * `worker` processes and two `api` processes, none of them inside the test process.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const startedAtMs = Date.now();
  const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-cluster-test-'));
  // PostgreSQL refuses to run as root; the OS user it runs as must be able to enter this folder.
  await chmod(dataDir, 0o711);
  const logsDir = join(dataDir, 'logs');
  const log = (line: string): void => void process.stderr.write(`[cluster] ${line}\n`);
  const stack = await startChargeguardStack({ dataDir, temporalUiPort: null, temporal: 'cluster', log });
  const processes: ChargeguardProcess[] = [];
  const stopAll = async (): Promise<void> => {
    await Promise.allSettled(processes.map((p) => p.stop()));
    await stack.stop();
    await rm(dataDir, { recursive: true, force: true });
  };
  try {
    if (stack.temporalKind !== 'cluster') {
      throw new Error(`the cluster tests need the stack's own Temporal server, but TEMPORAL_ADDRESS names one (${stack.temporalAddress})`);
    }
    const stackReadyAtMs = Date.now();
    await migrateLedger(stack.migrationDatabaseUrl);

    const cli: CliInvocation = { command: process.execPath, args: ['--import', 'tsx', 'src/cli/main.ts'] };
    const payloadKeysFile = stack.payloadKeysFilePath ?? (await ensurePayloadKeyFile(dataDir)).path;
    const workerEnv = {
      CHARGEGUARD_PAYLOAD_KEYS_FILE: payloadKeysFile,
      TEMPORAL_ADDRESS: stack.temporalAddress,
      DATABASE_URL: stack.databaseUrl,
      MIGRATION_DATABASE_URL: stack.migrationDatabaseUrl,
    };
    const common = { cli, startTimeoutMs: processStartTimeoutMs, stopTimeoutMs: processStopTimeoutMs };
    const workers = Array.from({ length: workerCount }, (_, i) =>
      startChargeguardProcess({
        ...common,
        name: `worker-${i + 1}`,
        commandArgs: ['worker'],
        env: workerEnv,
        logFilePath: join(logsDir, `worker-${i + 1}.log`),
        readyLine: workerReadyLine,
      }),
    );
    const apis = Array.from({ length: apiCount }, (_, i) =>
      startChargeguardProcess({
        ...common,
        name: `api-${i + 1}`,
        commandArgs: ['api', '--port', '0', '--log-level', 'warn'],
        // As the in-process test API: a longer wait for the outcome, limits far above the defaults.
        env: { ...workerEnv, CHARGE_WAIT_BUDGET_MS: '30000', ...generousRateLimits },
        logFilePath: join(logsDir, `api-${i + 1}.log`),
        readyLine: apiReadyLine,
      }),
    );
    const started = await Promise.allSettled([...workers, ...apis]);
    for (const result of started) if (result.status === 'fulfilled') processes.push(result.value);
    const failed = started.flatMap((r) => (r.status === 'rejected' ? [r.reason as Error] : []));
    if (failed.length > 0) throw new AggregateError(failed, failed.map((e) => e.message).join('\n\n'));

    log(
      `ready in ${Date.now() - startedAtMs} ms (PostgreSQL + Temporal server ${stackReadyAtMs - startedAtMs} ms, ` +
        `migrations + ${workerCount} workers + ${apiCount} APIs ${Date.now() - stackReadyAtMs} ms); ` +
        `resident memory: ${await residentMemory(processes.map((p) => ({ name: p.name, pid: p.pid })), dataDir)}`,
    );
    project.provide('stack', {
      temporalAddress: stack.temporalAddress,
      databaseUrl: stack.databaseUrl,
      migrationDatabaseUrl: stack.migrationDatabaseUrl,
      adminDatabaseUrl: stack.adminDatabaseUrl ?? stack.migrationDatabaseUrl,
      payloadKeysFile,
      // No bundle here: the cluster's workers are the CLI's own processes, which bundle at start.
      workflowBundlePath: '',
      dataDir,
    });
    project.provide('cluster', {
      apiUrls: processes.filter((p) => p.name.startsWith('api-')).map((p) => p.url!),
      workers: processes.filter((p) => p.name.startsWith('worker-')).map((p) => ({ name: p.name, pid: p.pid })),
      cli,
      workerEnv,
      logsDir,
    });
  } catch (error) {
    await stopAll().catch((stopError: unknown) => log(`cleanup after the failed start failed: ${(stopError as Error).message}`));
    throw error;
  }
  return stopAll;
}

/**
 * "worker-1 180 MB, …, temporal-server 120 MB" from ps; the server's pid is the one its lock file
 * records (other Temporal servers may run on the machine). Best effort: a line in the log, not a check.
 */
async function residentMemory(processes: Array<{ name: string; pid: number }>, dataDir: string): Promise<string> {
  try {
    const lock = JSON.parse(await readFile(join(dataDir, 'temporal-cluster', 'server.json'), 'utf8')) as { serverPid: number };
    const all = [...processes, { name: 'temporal-server', pid: lock.serverPid }];
    return all
      .map(({ name, pid }) => {
        const kb = Number(execFileSync('ps', ['-o', 'rss=', '-p', String(pid)], { encoding: 'utf8' }).trim());
        return `${name} ${Math.round(kb / 1024)} MB`;
      })
      .join(', ');
  } catch (error) {
    return `unknown (${(error as Error).message})`;
  }
}
