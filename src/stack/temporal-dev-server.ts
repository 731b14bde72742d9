import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { Connection } from '@temporalio/client';
import { indexedValueTypeByKind, type SearchAttributeKind } from '../support/search-attribute-kinds.js';
import { hasExited, killOnParentExit, terminate } from '../support/child-process.js';
import { findFreePorts } from '../support/free-port.js';
import { reniceServer } from './server-niceness.js';
import { LogSink } from '../support/log-sink.js';
import { reclaimServerLock, removeServerLock, writeServerLock } from './server-lock.js';
import { defaultStoreFaultLimits, SqliteStoreFaultDetector, type StoreFaultLimits } from './sqlite-store-fault.js';
import { resolveTemporalCliPath } from './temporal-cli.js';
import { isPortAccepting, pollUntil } from '../support/wait.js';

export interface TemporalDevServerOptions {
  /** SQLite file holding all Temporal state; created on first start, reused afterwards. */
  dbFilePath: string;
  /** Frontend gRPC port; a free port when omitted. */
  port?: number;
  /** Web UI port; a free port when omitted, no UI at all when null. */
  uiPort?: number | null;
  /**
   * The remote codec endpoint the Web UI decodes payloads with (the API's /codec), handed to the
   * UI as `--ui-codec-endpoint`; the UI shows encrypted payloads as they are without one.
   */
  uiCodecEndpoint?: string;
  namespace?: string;
  /** Where the server's stdout/stderr are appended. */
  logFilePath?: string;
  startTimeoutMs?: number;
  /** How long SIGTERM may take before SIGKILL. */
  stopTimeoutMs?: number;
  /**
   * Custom search attributes to register (name -> kind): the program's, given by whoever starts the
   * server (src/runtime/local-stack.ts), so the stack imports none of the program.
   */
  searchAttributes: Readonly<Record<string, SearchAttributeKind>>;
  /**
   * Niceness the server runs at once started (0-19; src/stack/server-niceness.ts), each process of
   * it: a store restart's too. 0 (the default) leaves it as started.
   */
  niceness?: number;
  /** Extra `--dynamic-config-value KEY=JSON` pairs. */
  dynamicConfigValues?: Readonly<Record<string, unknown>>;
  /** Defaults to {@link resolveTemporalCliPath}. */
  cliPath?: string;
  /** `--sqlite-pragma NAME=VALUE` pairs; defaults to {@link defaultSqlitePragmas}. */
  sqlitePragmas?: readonly string[];
  /** When a failing SQLite store restarts the server (src/stack/sqlite-store-fault.ts); {@link defaultStoreFaultLimits} by default. */
  storeFaultLimits?: StoreFaultLimits;
  /** Where a store restart and the niceness applied are said; stderr by default, as a restart must not pass unnoticed. */
  log?: (line: string) => void;
}

/**
 * Write-ahead logging instead of the dev server's rollback journal. Not a durability trade: SQLite
 * keeps synchronous=FULL, so every commit is still on disk before it is acknowledged, but a commit
 * costs one append and fsync instead of journal-and-page writes. The bench measured +26% charges/s
 * at 32 callers and -9% idle latency in one run, no difference beyond the noise in another
 * (docs/bench.md). synchronous=NORMAL gains more by letting a power cut lose the last commits; the
 * embedded stack does not take that trade.
 */
export const defaultSqlitePragmas: readonly string[] = ['journal_mode=WAL'];

export interface TemporalDevServer {
  /** host:port for Connection.connect / NativeConnection.connect. */
  address: string;
  uiUrl: string | null;
  /** Restarts made because the SQLite store was failing, so far. */
  storeRestarts(): number;
  stop(): Promise<void>;
}

/** One process of the server; a store restart replaces it with another on the same ports and file. */
interface Incarnation {
  address: string;
  port: number;
  uiPort: number | null;
  uiUrl: string | null;
  stop(): Promise<void>;
}

const host = '127.0.0.1';
const defaultStartTimeoutMs = 30_000;
const defaultStopTimeoutMs = 10_000;
const maxPortRaceAttempts = 3;

class StartFailure extends Error {
  constructor(
    message: string,
    /** A port we picked ourselves was taken before the server could bind it. */
    readonly pickedPortTaken: boolean,
  ) {
    super(message);
  }
}

/**
 * Starts `temporal server start-dev` persisted to a SQLite file and resolves once the frontend
 * answers gRPC calls, the namespace exists and the search attributes are registered.
 *
 * While it runs, its output is watched for a failing SQLite store (src/stack/sqlite-store-fault.ts):
 * then the process is stopped and a new one started on the same ports and file, at most
 * `maxRestarts` times, each said on `log`. Clients reconnect to the same address on their own.
 */
export async function startTemporalDevServer(opts: TemporalDevServerOptions): Promise<TemporalDevServer> {
  const cliPath = opts.cliPath ?? resolveTemporalCliPath();
  const limits = opts.storeFaultLimits ?? defaultStoreFaultLimits;
  const say = opts.log ?? ((line: string) => process.stderr.write(`${line}\n`));
  const detector = new SqliteStoreFaultDetector(limits);
  let onStoreFault = (): void => undefined;
  const onOutputLine = (line: string): void => {
    if (detector.see(line, Date.now())) onStoreFault();
  };

  let current = await startWithPortRetries(cliPath, opts, onOutputLine);
  const { address, port, uiPort, uiUrl } = current;
  let restarts = 0;
  let stopping = false;
  let gaveUpSaid = false;
  let restarting: Promise<void> | null = null;
  onStoreFault = () => {
    if (stopping || restarting !== null) return;
    if (restarts >= limits.maxRestarts) {
      if (!gaveUpSaid) say(`temporal: the dev server's SQLite store is failing again after ${restarts} restarts; not restarting it any more: stop everything and start again (log: ${opts.logFilePath ?? 'none'})`);
      gaveUpSaid = true;
      return;
    }
    restarts += 1;
    const startedAtMs = Date.now();
    say(
      `temporal: the dev server's SQLite store is failing every operation (${limits.faultLines} "interrupted (9)" errors within ${limits.windowMs} ms, ` +
        `a known fault of the dev server's store); restarting it on ${address} with the same file (restart ${restarts} of at most ${limits.maxRestarts})`,
    );
    restarting = (async () => {
      await current.stop();
      detector.reset();
      if (stopping) return;
      current = await startWithPortRetries(cliPath, { ...opts, port, uiPort }, onOutputLine);
      say(`temporal: dev server restarted on ${address} in ${Date.now() - startedAtMs} ms`);
    })()
      .catch((error: unknown) => say(`temporal: restarting the dev server failed; nothing serves ${address} now: ${(error as Error).message}`))
      .finally(() => {
        restarting = null;
      });
  };

  return {
    address,
    uiUrl,
    storeRestarts: () => restarts,
    stop: async () => {
      stopping = true;
      await restarting;
      await current.stop();
    },
  };
}

async function startWithPortRetries(cliPath: string, opts: TemporalDevServerOptions, onOutputLine: (line: string) => void): Promise<Incarnation> {
  const deadlineMs = Date.now() + (opts.startTimeoutMs ?? defaultStartTimeoutMs);
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(cliPath, opts, deadlineMs, onOutputLine);
    } catch (err) {
      // A free port we picked can be taken by someone else before the server binds it; only then
      // is a retry with fresh ports meaningful.
      const retry = err instanceof StartFailure && err.pickedPortTaken && attempt < maxPortRaceAttempts;
      if (!retry || Date.now() >= deadlineMs) throw err;
    }
  }
}

async function startOnce(cliPath: string, opts: TemporalDevServerOptions, deadlineMs: number, onOutputLine: (line: string) => void): Promise<Incarnation> {
  const namespace = opts.namespace ?? 'default';
  const searchAttributes = opts.searchAttributes;
  const dbFilePath = resolve(opts.dbFilePath);
  await mkdir(dirname(dbFilePath), { recursive: true });

  // Two spare: the ports the caller gave (a remembered one, the UI's) are free too, so the kernel may offer them.
  const [freePort, freeUiPort, freeHttpPort] = (await findFreePorts(5, host)).filter((free) => free !== opts.port && free !== opts.uiPort);
  const port = opts.port ?? freePort!;
  const uiPort = opts.uiPort === null ? null : (opts.uiPort ?? freeUiPort!);
  // Picked here too, among the others, rather than left to the CLI: its own "random free port"
  // probe ran while the gRPC port we had just probed was still free, and once took it, so the
  // server failed to bind its own gRPC port.
  const httpPort = freeHttpPort!;
  const pickedPorts = new Set<number>([httpPort]);
  if (opts.port === undefined) pickedPorts.add(port);
  if (opts.uiPort === undefined && uiPort !== null) pickedPorts.add(uiPort);
  const args = buildArgs({
    dbFilePath,
    port,
    httpPort,
    uiPort,
    uiCodecEndpoint: opts.uiCodecEndpoint,
    namespace,
    searchAttributes,
    dynamicConfigValues: opts.dynamicConfigValues ?? {},
    sqlitePragmas: opts.sqlitePragmas ?? defaultSqlitePragmas,
  });

  const stopTimeoutMs = opts.stopTimeoutMs ?? defaultStopTimeoutMs;
  const sink = new LogSink(opts.logFilePath, undefined, onOutputLine);
  const lockPath = `${dbFilePath}.server.json`;
  try {
    await reclaimOrphanedDevServer(dbFilePath, (line) => sink.note(line), stopTimeoutMs);
  } catch (err) {
    await sink.close();
    throw err;
  }
  sink.note(`starting ${cliPath} ${args.join(' ')}`);
  // A process group of its own (detached): a Ctrl-C in the terminal reaches only the command that
  // owns this server, which stops its worker first and this server after; in the terminal's group the
  // server stopped at once under a worker still draining. killOnParentExit below still ends it when
  // the owner exits without stopping it.
  const child = spawn(cliPath, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  // Aborts all waiting as soon as the server dies: no point in waiting for the deadline then.
  const serverGone = new AbortController();
  let spawnError: Error | null = null;
  child.on('error', (err) => {
    spawnError = err;
    sink.note(`spawn error: ${err.message}`);
    serverGone.abort();
  });
  child.on('exit', () => serverGone.abort());
  child.stdout?.on('data', (chunk: Buffer) => sink.write(chunk));
  child.stderr?.on('data', (chunk: Buffer) => sink.write(chunk));
  child.on('exit', (code, signal) => sink.note(`server exited (code ${code ?? 'null'}, signal ${signal ?? 'null'})`));
  const removeExitHook = killOnParentExit(child);

  const address = `${host}:${port}`;
  try {
    if (child.pid !== undefined) await writeServerLock(lockPath, child.pid);
    await waitUntilReady({ child, address, port, uiPort, namespace, deadlineMs, serverGone: serverGone.signal, spawnError: () => spawnError });
    await ensureSearchAttributes(address, namespace, searchAttributes, deadlineMs);
    if (child.pid !== undefined) reniceServer('temporal', child.pid, opts.niceness ?? 0, opts.log ?? ((line: string) => process.stderr.write(`${line}\n`)));
  } catch (err) {
    await terminate(child, { signal: 'SIGTERM', graceMs: stopTimeoutMs }).catch((stopErr: unknown) => sink.note(`stopping the server that failed to start failed: ${(stopErr as Error).message}`));
    removeExitHook();
    await removeServerLock(lockPath);
    await sink.close();
    const reason = err instanceof Error ? err.message : String(err);
    const tail = sink.tail();
    throw new StartFailure(
      `Temporal dev server (${cliPath}) failed to start on ${address}: ${reason}` +
        (opts.logFilePath ? ` (full log: ${opts.logFilePath})` : '') +
        (tail ? `\n--- last server output ---\n${tail}` : ''),
      takenPorts(tail).some((taken) => pickedPorts.has(taken)),
    );
  }

  let stopping: Promise<void> | null = null;
  return {
    address,
    port,
    uiPort,
    uiUrl: uiPort === null ? null : `http://${host}:${uiPort}`,
    stop: () => {
      stopping ??= (async () => {
        try {
          const { forced } = await terminate(child, { signal: 'SIGTERM', graceMs: stopTimeoutMs });
          if (forced) sink.note(`server ignored SIGTERM for ${stopTimeoutMs} ms and was killed`);
        } finally {
          removeExitHook();
          await removeServerLock(lockPath);
          await sink.close();
        }
      })();
      return stopping;
    },
  };
}

/**
 * Stops a dev server that an owner which died left running on this SQLite file (its lock file names
 * the dead owner) and removes the lock; refuses when the owner is alive. Every start does it; the
 * stack does it before it chooses ports, so the orphan's port, the remembered one, is free again.
 */
export function reclaimOrphanedDevServer(dbFilePath: string, log: (line: string) => void, stopTimeoutMs = defaultStopTimeoutMs): Promise<void> {
  const path = resolve(dbFilePath);
  return reclaimServerLock(`${path}.server.json`, { what: `Temporal SQLite file ${path}`, stopSignal: 'SIGTERM', graceMs: stopTimeoutMs, log });
}

function buildArgs(p: {
  dbFilePath: string;
  port: number;
  httpPort: number;
  uiPort: number | null;
  uiCodecEndpoint: string | undefined;
  namespace: string;
  searchAttributes: Readonly<Record<string, SearchAttributeKind>>;
  dynamicConfigValues: Readonly<Record<string, unknown>>;
  sqlitePragmas: readonly string[];
}): string[] {
  const args = ['server', 'start-dev', '--db-filename', p.dbFilePath, '--ip', host, '--port', String(p.port), '--http-port', String(p.httpPort)];
  args.push(...(p.uiPort === null ? ['--headless'] : ['--ui-port', String(p.uiPort)]));
  if (p.uiPort !== null && p.uiCodecEndpoint !== undefined) args.push('--ui-codec-endpoint', p.uiCodecEndpoint);
  // "default" is always created by the dev server; naming it again would only register it twice.
  if (p.namespace !== 'default') args.push('--namespace', p.namespace);
  // Only takes effect when the namespace is first created; ensureSearchAttributes covers the rest.
  for (const [name, kind] of Object.entries(p.searchAttributes)) args.push('--search-attribute', `${name}=${kind}`);
  for (const [key, value] of Object.entries(p.dynamicConfigValues)) {
    args.push('--dynamic-config-value', `${key}=${JSON.stringify(value)}`);
  }
  for (const pragma of p.sqlitePragmas) args.push('--sqlite-pragma', pragma);
  args.push('--log-level', 'warn');
  return args;
}

async function waitUntilReady(p: {
  child: ChildProcess;
  address: string;
  port: number;
  uiPort: number | null;
  namespace: string;
  deadlineMs: number;
  serverGone: AbortSignal;
  spawnError: () => Error | null;
}): Promise<void> {
  const died = (): boolean => p.serverGone.aborted || hasExited(p.child);
  const diedError = (): Error =>
    p.spawnError() ?? new Error(`server process exited early (code ${p.child.exitCode ?? 'null'}, signal ${p.child.signalCode ?? 'null'})`);

  const portOpen = await pollUntil(() => isPortAccepting(p.port, host), { deadlineMs: p.deadlineMs, signal: p.serverGone });
  if (died()) throw diedError();
  if (!portOpen.ok) throw new Error(`gRPC port ${p.port} did not accept connections before the deadline`);

  // The port opens before the frontend can serve requests, so ask it something real.
  const serving = await pollUntil(
    () =>
      withConnection(p.address, p.deadlineMs, async (connection) => {
        await connection.withDeadline(p.deadlineMs, () => connection.workflowService.getSystemInfo({}));
        await connection.withDeadline(p.deadlineMs, () => connection.workflowService.describeNamespace({ namespace: p.namespace }));
        return true;
      }),
    { deadlineMs: p.deadlineMs, intervalMs: 200, signal: p.serverGone },
  );
  if (died()) throw diedError();
  if (!serving.ok) throw new Error(`frontend did not answer getSystemInfo/describeNamespace before the deadline: ${describe(serving.lastError)}`);

  if (p.uiPort !== null) {
    const uiPort = p.uiPort;
    const uiOpen = await pollUntil(() => isPortAccepting(uiPort, host), { deadlineMs: p.deadlineMs, signal: p.serverGone });
    if (died()) throw diedError();
    if (!uiOpen.ok) throw new Error(`Web UI port ${uiPort} did not accept connections before the deadline`);
  }
}

/**
 * The dev server only applies --search-attribute when it creates the namespace, so a SQLite file
 * from an earlier version of this list would silently lack newer attributes. Registering them
 * through the operator API keeps the list in this file authoritative for existing files too.
 */
async function ensureSearchAttributes(
  address: string,
  namespace: string,
  wanted: Readonly<Record<string, SearchAttributeKind>>,
  deadlineMs: number,
): Promise<void> {
  if (Object.keys(wanted).length === 0) return;
  await withConnection(address, deadlineMs, async (connection) => {
    const existing = await connection.withDeadline(deadlineMs, () =>
      connection.operatorService.listSearchAttributes({ namespace }),
    );
    const custom = existing.customAttributes ?? {};
    const missing: Record<string, number> = {};
    for (const [name, kind] of Object.entries(wanted)) {
      const wantedType = indexedValueTypeByKind[kind];
      const actualType = custom[name];
      if (actualType === undefined || actualType === null) {
        missing[name] = wantedType;
      } else if (Number(actualType) !== wantedType) {
        throw new Error(
          `search attribute ${name} exists with type ${String(actualType)} but ${kind} (${wantedType}) is required; ` +
            'delete the Temporal SQLite file to start over',
        );
      }
    }
    if (Object.keys(missing).length > 0) {
      await connection.withDeadline(deadlineMs, () =>
        connection.operatorService.addSearchAttributes({ namespace, searchAttributes: missing }),
      );
    }
  });
}

async function withConnection<T>(address: string, deadlineMs: number, fn: (connection: Connection) => Promise<T>): Promise<T> {
  const connectTimeoutMs = Math.max(1, Math.min(5_000, deadlineMs - Date.now()));
  // Not Connection.connect(): when connecting fails it leaves the gRPC channel open, and every
  // failed poll would leak one that keeps the process alive.
  const connection = Connection.lazy({ address, connectTimeout: connectTimeoutMs });
  try {
    await connection.ensureConnected();
    return await fn(connection);
  } finally {
    await connection.close();
  }
}

/** Ports the server's output reports as already in use ("can't set UI port 8233: … address already in use"). */
function takenPorts(output: string): number[] {
  return output
    .split('\n')
    .filter((line) => /address already in use/i.test(line))
    // "… port 7233 …" in the CLI's own messages, "listen tcp 127.0.0.1:7233: bind: …" in the server's.
    .flatMap((line) => [...line.matchAll(/port (\d+)|:(\d+): bind/gi)].map((m) => Number(m[1] ?? m[2])));
}

function describe(err: unknown): string {
  if (err === undefined) return 'no response';
  return err instanceof Error ? err.message : String(err);
}
