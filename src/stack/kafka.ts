import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Admin } from '@platformatic/kafka';
import { hasExited, killOnParentExit, terminate } from '../support/child-process.js';
import { findFreePorts } from '../support/free-port.js';
import { LogSink } from '../support/log-sink.js';
import { repoRoot } from '../support/repo-root.js';
import { pollUntil } from '../support/wait.js';

/**
 * A single-node Apache Kafka (KRaft: broker and controller in one JVM) for queue intake and the
 * event stream (docs/queues.md), run from the jars scripts/install-kafka.sh puts in .tools/kafka.
 * KAFKA_BROKERS points the service at a real cluster instead; then nothing is started here.
 */

/** The version scripts/install-kafka.sh installs; the two change together. */
export const kafkaVersion = '4.1.2';

export interface KafkaBrokerOptions {
  /** The broker's own folder: its log segments (data/), its settings and log4j file. */
  dataDir: string;
  /** Client port; a free one when omitted (a restart passes the first start's port back). */
  port?: number;
  /** Controller (KRaft quorum) port; a free one when omitted. */
  controllerPort?: number;
  /** Where the JVM's output is appended. */
  logFilePath?: string;
  /** How long the start may take, in ms (format + JVM start + first metadata answer). */
  startTimeoutMs?: number;
  /** How long SIGTERM (a controlled shutdown) may take before SIGKILL, in ms. */
  stopTimeoutMs?: number;
  /** Partitions of a topic the broker creates without being told (the intake creates its own). */
  defaultPartitions?: number;
  /** The JVM's heap ceiling in MiB: small, as the machine is shared with Temporal and PostgreSQL. */
  heapMaxMiB?: number;
}

export interface KafkaBroker {
  /** host:port, what KAFKA_BROKERS holds. */
  brokers: string;
  port: number;
  controllerPort: number;
  stop(): Promise<void>;
  /** Ends the JVM at once (SIGKILL), as a crash would: for tests of what survives one. */
  kill(): Promise<void>;
}

const host = '127.0.0.1';
const defaultStartTimeoutMs = 60_000;
const defaultStopTimeoutMs = 15_000;
const defaultHeapMaxMiB = 512;

/** The folder of the installed jars, or a clear error naming the installer. */
export function kafkaLibsDir(root = repoRoot()): string {
  const dir = join(root, '.tools', 'kafka', kafkaVersion);
  if (!existsSync(join(dir, '.installed'))) {
    throw new Error(`Kafka ${kafkaVersion} is not installed in ${dir}: run \`bash scripts/install-kafka.sh\` (npm run setup does; it needs Java 17+ and mvn)`);
  }
  return dir;
}

/**
 * The broker's settings: one node that is both broker and controller, on loopback, every internal
 * topic with one replica (there is one broker), no automatic topic creation (a typo in a topic name
 * is an error, not a new topic), and no delay before the first consumer group rebalance (the
 * default 3 s only helps groups whose members start together by chance).
 */
export function kafkaServerProperties(opts: { port: number; controllerPort: number; logDir: string; defaultPartitions: number }): string {
  return [
    'process.roles=broker,controller',
    'node.id=1',
    `listeners=PLAINTEXT://${host}:${opts.port},CONTROLLER://${host}:${opts.controllerPort}`,
    `advertised.listeners=PLAINTEXT://${host}:${opts.port}`,
    'controller.listener.names=CONTROLLER',
    'inter.broker.listener.name=PLAINTEXT',
    'listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT',
    `controller.quorum.voters=1@${host}:${opts.controllerPort}`,
    `log.dirs=${opts.logDir}`,
    `num.partitions=${opts.defaultPartitions}`,
    'auto.create.topics.enable=false',
    'offsets.topic.replication.factor=1',
    'offsets.topic.num.partitions=4',
    'transaction.state.log.replication.factor=1',
    'transaction.state.log.min.isr=1',
    'share.coordinator.state.topic.replication.factor=1',
    'share.coordinator.state.topic.min.isr=1',
    'group.initial.rebalance.delay.ms=0',
    '',
  ].join('\n');
}

/** Warnings only, on stdout (the log sink keeps them), plus the line that says the broker is up. */
const log4jProperties = [
  'status = warn',
  'appender.out.type = Console',
  'appender.out.name = out',
  'appender.out.layout.type = PatternLayout',
  'appender.out.layout.pattern = [%d] %p %m (%c)%n',
  'rootLogger.level = warn',
  'rootLogger.appenderRef.out.ref = out',
  'logger.server.name = kafka.server.KafkaRaftServer',
  'logger.server.level = info',
  '',
].join('\n');

/** A KRaft cluster id: 16 random bytes, base64url without padding (what `kafka-storage random-uuid` prints). */
function newClusterId(): string {
  return randomBytes(16).toString('base64url');
}

function javaArgs(libsDir: string, heapMaxMiB: number, log4jFile: string): string[] {
  return [
    `-Xmx${heapMaxMiB}m`,
    '-Xms64m',
    // The broker's own launch script's choice of collector, without its 1 GiB heap.
    // C1 only: the broker starts about twice as fast; throughput is far above what the tests need.
    '-XX:TieredStopAtLevel=1',
    '-XX:+UseG1GC',
    '-XX:MaxGCPauseMillis=20',
    '-Djava.awt.headless=true',
    `-Dlog4j2.configurationFile=${log4jFile}`,
    '-cp',
    `${libsDir}/*`,
  ];
}

async function runToEnd(command: string, args: string[], sink: LogSink): Promise<void> {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout.on('data', (chunk: Buffer) => sink.write(chunk));
  child.stderr.on('data', (chunk: Buffer) => sink.write(chunk));
  const code = await new Promise<number | null>((done, fail) => {
    child.once('error', fail);
    child.once('exit', (exitCode) => done(exitCode));
  });
  if (code !== 0) throw new Error(`${command} ${args.slice(-6).join(' ')} exited with ${code ?? 'a signal'}:\n${sink.tail()}`);
}

/**
 * Formats the broker's storage on first start (a cluster id of its own, kept in the data dir's
 * meta.properties), starts the JVM and resolves once the broker answers a metadata request.
 */
export async function startKafkaBroker(opts: KafkaBrokerOptions): Promise<KafkaBroker> {
  const libsDir = kafkaLibsDir();
  const dataDir = resolve(opts.dataDir);
  const logDir = join(dataDir, 'data');
  await mkdir(dataDir, { recursive: true });
  const free = (await findFreePorts(4, host)).filter((p) => p !== opts.port && p !== opts.controllerPort);
  const port = opts.port ?? free[0]!;
  const controllerPort = opts.controllerPort ?? free[1]!;
  const propertiesFile = join(dataDir, 'server.properties');
  const log4jFile = join(dataDir, 'log4j2.properties');
  await writeFile(propertiesFile, kafkaServerProperties({ port, controllerPort, logDir, defaultPartitions: opts.defaultPartitions ?? 3 }));
  await writeFile(log4jFile, log4jProperties);
  const heap = opts.heapMaxMiB ?? defaultHeapMaxMiB;
  const sink = new LogSink(opts.logFilePath);
  const deadlineMs = Date.now() + (opts.startTimeoutMs ?? defaultStartTimeoutMs);

  if (!existsSync(join(logDir, 'meta.properties'))) {
    sink.note(`formatting ${logDir}`);
    await runToEnd('java', [...javaArgs(libsDir, 256, log4jFile), 'kafka.tools.StorageTool', 'format', `--cluster-id=${newClusterId()}`, '-c', propertiesFile, '--ignore-formatted'], sink);
  }

  const args = [...javaArgs(libsDir, heap, log4jFile), 'kafka.Kafka', propertiesFile];
  sink.note(`starting java kafka.Kafka on ${host}:${port} (controller ${controllerPort})`);
  const child: ChildProcess = spawn('java', args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  child.stdout?.on('data', (chunk: Buffer) => sink.write(chunk));
  child.stderr?.on('data', (chunk: Buffer) => sink.write(chunk));
  child.on('exit', (code, signal) => sink.note(`broker exited (code ${code ?? 'null'}, signal ${signal ?? 'null'})`));
  child.on('error', (error) => sink.note(`spawn error: ${error.message}`));
  const removeExitHook = killOnParentExit(child);
  const brokers = `${host}:${port}`;

  const ready = await pollUntil(() => brokerAnswers(brokers), { deadlineMs, intervalMs: 250, shouldAbort: () => hasExited(child) });
  if (!ready.ok) {
    await terminate(child, { signal: 'SIGKILL', graceMs: 1_000 }).catch((error: unknown) => sink.note(`stopping the failed broker failed: ${(error as Error).message}`));
    removeExitHook();
    await sink.close();
    throw new Error(
      `Kafka broker failed to start on ${brokers}: ${hasExited(child) ? 'the JVM exited' : 'no metadata answer before the deadline'}` +
        (ready.lastError ? ` (${(ready.lastError as Error).message})` : '') +
        (opts.logFilePath ? ` (full log: ${opts.logFilePath})` : '') +
        `\n--- last broker output ---\n${sink.tail()}`,
    );
  }
  const stopTimeoutMs = opts.stopTimeoutMs ?? defaultStopTimeoutMs;
  const end = async (signal: NodeJS.Signals): Promise<void> => {
    try {
      await terminate(child, { signal, graceMs: stopTimeoutMs });
    } finally {
      removeExitHook();
      await sink.close();
    }
  };
  return { brokers, port, controllerPort, stop: () => end('SIGTERM'), kill: () => end('SIGKILL') };
}

/** True once the broker answers a metadata request (its listener is up and the controller elected it). */
async function brokerAnswers(brokers: string): Promise<boolean> {
  const admin = new Admin({ clientId: 'chargeguard-readiness', bootstrapBrokers: [brokers], timeout: 2_000, retries: 0 });
  try {
    await admin.listTopics();
    return true;
  } finally {
    await admin.close();
  }
}
