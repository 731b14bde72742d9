import { join, resolve } from 'node:path';
import type { ChargeguardConfig } from '../../config.js';
import { dependencyWaitLimitsFromConfig, migrateLedgerWhenReachable } from '../../runtime/app-context.js';
import { runAll, withStackPayloadKeys } from '../../runtime/local-runtime.js';
import { payloadEnvironment, type PayloadSettings } from '../../codec/payload-protection.js';
import type { ProcessSafetyNet } from '../../runtime/process-safety.js';
import {
  apiReadyLine,
  currentCliInvocation,
  startChargeguardProcess,
  workerReadyLine,
  type ChargeguardProcess,
} from '../../stack/chargeguard-processes.js';
import type { LocalStack } from '../../stack/stack.js';
import { Supervisor } from '../../stack/supervisor.js';
import { findFreePort } from '../../support/free-port.js';
import { startTemporalUiServer, type TemporalUiServer } from '../../stack/temporal-ui-server.js';
import { codecPrefix, loopbackUiOrigins, withCodecCorsOrigins } from '../../codec/codec-routes.js';
import { step } from '../../support/progress.js';
import { waitForStopReason } from '../shutdown.js';
import { startChargeguardStack } from '../../runtime/local-stack.js';
import { startKafkaBroker, type KafkaBroker } from '../../stack/kafka.js';

/** What `consume` says once it reads: the line its readiness is judged by. */
const consumeReadyLine = /consuming \S+ on \S+ as group/;

export interface ClusterStartOptions {
  host: string;
  /** One API process per port. */
  apiPorts: readonly number[];
  workerCount: number;
  /** The Temporal Web UI's loopback port (0: a free one). */
  uiPort: number;
  /** Also a single-node Kafka (or KAFKA_BROKERS) and a `consume` process (docs/queues.md). */
  kafka?: boolean;
  /** How other terminals reach the same servers (start.ts's lines, shared with the dev shape). */
  connectionLines: (stack: LocalStack, payload: PayloadSettings) => string[];
}

/** More would only compete for the same cores; a real deployment scales on more machines. */
export const maxClusterProcessesPerKind = 8;
/** A worker bundles the workflows (webpack) at start unless it runs from the build. */
const processStartTimeoutMs = 180_000;
/** A worker drains its in-flight tasks on SIGTERM; this long before SIGKILL. */
const processStopTimeoutMs = 30_000;

/**
 * `start --cluster`: the production shape on one machine. PostgreSQL and the real Temporal server
 * on it (src/stack/temporal-cluster.ts), the ledger migrated once, then chargeguard's own
 * processes as children: `workerCount` workers and one API per port, each kept running by a
 * supervisor (src/stack/supervisor.ts): a child that exits is said on stderr and started again
 * with a growing delay, while the others go on serving. Everything stops in order on Ctrl-C or
 * SIGTERM, or when a child keeps crashing and its supervisor gives up.
 */
export async function runClusterStart(config: ChargeguardConfig, safety: ProcessSafetyNet, options: ClusterStartOptions): Promise<void> {
  const log = (line: string): void => void process.stderr.write(`  ${line}\n`);
  const dataDir = resolve(config.CHARGEGUARD_DATA_DIR);
  const logsDir = join(dataDir, 'logs');
  const stack = await step('starting PostgreSQL and the Temporal server', () =>
    startChargeguardStack({ dataDir, temporalUiPort: null, temporal: 'cluster', supervise: true, serverNiceness: config.CHARGEGUARD_EMBEDDED_SERVER_NICENESS, log }),
  );
  const supervisors: Array<Supervisor<ChargeguardProcess>> = [];
  let ui: Supervisor<TemporalUiServer> | null = null;
  let broker: KafkaBroker | null = null;
  let failure: unknown = undefined;
  try {
    await step('migrating the ledger', () =>
      migrateLedgerWhenReachable(stack.migrationDatabaseUrl, { limits: dependencyWaitLimitsFromConfig(config), log }),
    );
    // Through the environment, not the command line: the URLs carry the roles' passwords. The
    // children find the payload keys as other terminals do: the stack's key file, or what was set.
    const payload = withStackPayloadKeys(config, stack);
    // Picked before the APIs start: their codec endpoint must allow the UI's origin.
    const uiPort = options.uiPort === 0 ? await findFreePort() : options.uiPort;
    if (options.kafka === true && config.KAFKA_BROKERS === undefined) {
      broker = await step('starting Kafka (single node, KRaft)', () => startKafkaBroker({ dataDir: join(dataDir, 'kafka'), logFilePath: join(logsDir, 'kafka.log') }));
    }
    const kafkaBrokers = options.kafka === true ? (broker?.brokers ?? config.KAFKA_BROKERS!) : null;
    const env = {
      ...(kafkaBrokers === null ? {} : { KAFKA_BROKERS: kafkaBrokers }),
      TEMPORAL_ADDRESS: stack.temporalAddress,
      DATABASE_URL: stack.databaseUrl,
      MIGRATION_DATABASE_URL: stack.migrationDatabaseUrl,
      CHARGEGUARD_CODEC_CORS_ORIGINS: withCodecCorsOrigins(config.CHARGEGUARD_CODEC_CORS_ORIGINS, loopbackUiOrigins(uiPort)),
      ...payloadEnvironment(payload),
    };
    const cli = currentCliInvocation();
    const common = { cli, env, startTimeoutMs: processStartTimeoutMs, stopTimeoutMs: processStopTimeoutMs };
    const starts = [
      ...Array.from({ length: options.workerCount }, (_, i) => ({ name: `worker-${i + 1}`, commandArgs: ['worker'], readyLine: workerReadyLine })),
      ...options.apiPorts.map((port, i) => ({
        name: `api-${i + 1}`,
        commandArgs: ['api', '--host', options.host, '--port', String(port), '--log-level', 'warn'],
        readyLine: apiReadyLine,
      })),
      // One consumer of the intake's group (more join with `chargeguard consume`); it also publishes the event stream.
      ...(kafkaBrokers === null ? [] : [{ name: 'consume-1', commandArgs: ['consume', '--metrics-port', '0'], readyLine: consumeReadyLine }]),
    ];
    const said = (line: string): void => void process.stderr.write(`${line}\n`);
    for (const s of starts) {
      // An API restarted on port 0 gets another free port: its first one is kept, so callers keep their URL.
      let commandArgs = s.commandArgs;
      supervisors.push(
        new Supervisor({
          name: s.name,
          start: () => startChargeguardProcess({ ...common, ...s, commandArgs, logFilePath: join(logsDir, `${s.name}.log`) }),
          log: (line) => said(`${line}; log in ${s.name}.log`),
          onReady: (child) => {
            const port = child.url === null ? null : new URL(child.url).port;
            if (port !== null) commandArgs = commandArgs.map((arg, i) => (commandArgs[i - 1] === '--port' ? port : arg));
          },
        }),
      );
    }
    const started = await step(`starting ${options.workerCount} worker and ${options.apiPorts.length} API processes`, () =>
      Promise.allSettled(supervisors.map((supervisor) => supervisor.start())),
    );
    const failed = started.flatMap((r) => (r.status === 'rejected' ? [r.reason as Error] : []));
    if (failed.length > 0) throw new AggregateError(failed, failed.map((e) => e.message).join('\n\n'));
    const processes = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));

    // The Web UI, decoding through the first API's codec endpoint when it serves one (a codec token is set).
    const firstApiUrl = processes.find((p) => p.name === 'api-1')?.url ?? null;
    const codecEndpoint = config.CHARGEGUARD_CODEC_TOKEN !== undefined && firstApiUrl !== null ? `${firstApiUrl}${codecPrefix}` : null;
    const uiSupervisor = new Supervisor<TemporalUiServer>({
      name: 'temporal-ui',
      start: () =>
        startTemporalUiServer({ workDir: join(dataDir, 'temporal-ui'), temporalAddress: stack.temporalAddress, port: uiPort, codecEndpoint, logFilePath: join(logsDir, 'temporal-ui.log') }),
      log: (line) => said(`${line}; log in temporal-ui.log`),
    });
    ui = uiSupervisor;
    const uiServer = await step('starting the Temporal Web UI', () => uiSupervisor.start());

    process.stdout.write(
      `${[
        ...runningLines(stack, processes, logsDir),
        ...(kafkaBrokers === null ? [] : [`  Kafka:           ${kafkaBrokers}; queue intake and event stream in consume-1 (docs/queues.md)`]),
        ...uiLines(uiServer.url, codecEndpoint, firstApiUrl),
        '',
        ...options.connectionLines(stack, payload),
        ...(kafkaBrokers === null ? [] : [`  export KAFKA_BROKERS=${kafkaBrokers}`]),
        'Ctrl-C stops everything.',
      ].join('\n')}\n`,
    );
    const stop = await waitForStopReason(safety, {
      'the cluster': Promise.race([stack.supervisionGaveUp, uiSupervisor.gaveUp, ...supervisors.map((supervisor) => supervisor.gaveUp)]),
    });
    failure = stop.error;
    process.stderr.write(`stopping (${stop.reason})…\n`);
  } catch (error) {
    failure ??= error;
  } finally {
    // APIs first (no new charges), then the workers drain, then Temporal and PostgreSQL.
    await runAll(
      [
        ['stop the Temporal Web UI', async () => ui?.stop()],
        // The intake first: no new charges from the queue while the APIs and workers stop.
        ['stop the queue intake', () => stopEach(supervisors.filter((p) => p.name.startsWith('consume-')), 'queue intake', log)],
        ['stop the API processes', () => stopEach(supervisors.filter((p) => p.name.startsWith('api-')), 'API processes', log)],
        ['stop the worker processes', () => stopEach(supervisors.filter((p) => p.name.startsWith('worker-')), 'worker processes', log)],
        ['stop Kafka', async () => broker?.stop()],
        ['stop Temporal and PostgreSQL', () => stack.stop()],
      ],
      log,
    ).catch((error: unknown) => {
      failure ??= error;
    });
  }
  if (failure !== undefined) throw failure;
}

async function stopEach(processes: ReadonlyArray<{ stop(): Promise<void> }>, what: string, log: (line: string) => void): Promise<void> {
  const startedAtMs = Date.now();
  const results = await Promise.allSettled(processes.map((p) => p.stop()));
  const errors = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
  if (errors.length > 0) throw new AggregateError(errors, `${errors.length} process(es) did not stop`);
  log(`${what} stopped (${Date.now() - startedAtMs} ms)`);
}

function runningLines(stack: LocalStack, processes: readonly ChargeguardProcess[], logsDir: string): string[] {
  const apis = processes.filter((p) => p.name.startsWith('api-'));
  const workers = processes.filter((p) => p.name.startsWith('worker-'));
  return [
    `chargeguard is running on a cluster: Temporal server on PostgreSQL, ${workers.length} worker and ${apis.length} API processes`,
    ...apis.map((p, i) => `  ${i === 0 ? 'HTTP API:' : '         '}        ${p.url}  (${p.name}, pid ${p.pid}; OpenAPI ${p.url}/openapi.json)`),
    `  workers:         ${workers.map((p) => `${p.name} (pid ${p.pid})`).join(', ')}, task queue "charges"`,
    `  Temporal:        ${stack.temporalAddress}`,
    `  logs:            ${logsDir}`,
  ];
}

/** Where the Web UI is and how it decodes payloads (docs/operations.md, The Web UI and the codec endpoint). */
function uiLines(uiUrl: string, codecEndpoint: string | null, apiUrl: string | null): string[] {
  return [
    `  Temporal Web UI: ${uiUrl}`,
    codecEndpoint === null || apiUrl === null
      ? '                   payloads shown encrypted: set CHARGEGUARD_CODEC_TOKEN to decode them through the API'
      : `                   decodes payloads through ${codecEndpoint}: open ${apiUrl}${codecPrefix}/session once in the same browser and enter CHARGEGUARD_CODEC_TOKEN`,
  ];
}

/**
 * The API ports: the given list, else `count` consecutive ports from `firstPort` (0: each API on a
 * free port of its own). Refuses what is not a port or more processes than the limit.
 */
export function clusterApiPorts(options: { apiPorts?: string; port: string; apis: string }): number[] {
  if (options.apiPorts !== undefined) {
    const ports = options.apiPorts.split(',').map((part) => parsePort(part.trim(), '--api-ports'));
    if (ports.length > maxClusterProcessesPerKind) throw new Error(`--api-ports: at most ${maxClusterProcessesPerKind} API processes, got ${ports.length}`);
    const nonZero = ports.filter((p) => p !== 0);
    if (new Set(nonZero).size !== nonZero.length) throw new Error(`--api-ports: ${options.apiPorts} names a port twice`);
    return ports;
  }
  const count = parseCount(options.apis, '--apis');
  const first = parsePort(options.port, '--port');
  if (first !== 0 && first + count - 1 > 65_535) throw new Error(`--port ${first} with --apis ${count} runs past port 65535`);
  return Array.from({ length: count }, (_, i) => (first === 0 ? 0 : first + i));
}

export function parseCount(value: string, flag: string): number {
  const count = Number(value);
  if (!/^\d+$/.test(value) || count < 1 || count > maxClusterProcessesPerKind) {
    throw new Error(`${flag} must be a whole number from 1 to ${maxClusterProcessesPerKind}, got "${value}"`);
  }
  return count;
}

function parsePort(value: string, flag: string): number {
  const port = Number(value);
  if (!/^\d+$/.test(value) || port > 65_535) throw new Error(`${flag}: "${value}" is not a port (0-65535)`);
  return port;
}
