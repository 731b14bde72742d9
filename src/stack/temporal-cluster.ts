import { spawn } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { killOnParentExit, terminate } from '../support/child-process.js';
import { LogSink } from '../support/log-sink.js';
import { reclaimServerLock, removeServerLock, writeServerLock } from './server-lock.js';
import {
  defaultNumHistoryShards,
  renderConfigFile,
  temporalClusterConfig,
  temporalClusterDynamicConfig,
  temporalServiceNames,
  type TemporalServiceName,
  type TemporalClusterTls,
  type TemporalServicePorts,
} from './temporal-cluster-config.js';
import { removeStaleMembership } from './temporal-cluster-membership.js';
import { findFreePortsBelow, smallintPortCeiling } from './temporal-cluster-ports.js';
import { clientTlsFor, ensureNamespace, waitUntilServing } from './temporal-cluster-readiness.js';
import {
  createDatabasesIfMissing,
  parsePostgresUrl,
  provisionServerRole,
  resolveTemporalServerInstall,
  setUpSchema,
  type ServerPaths,
} from './temporal-cluster-schema.js';
import type { SearchAttributeKind } from '../support/search-attribute-kinds.js';

export { findFreePortsBelow, smallintPortCeiling } from './temporal-cluster-ports.js';
export { resolveTemporalServerInstall } from './temporal-cluster-schema.js';

export interface TemporalClusterOptions {
  /** Holds the generated config, the dynamic config and the lock; created if missing. */
  workDir: string;
  /**
   * URL of a PostgreSQL role allowed to create databases (the embedded server's superuser): the
   * server's two databases are created on that server if missing, and the server connects as it.
   */
  postgresUrl: string;
  /**
   * The role the server and its schema tool connect as: created (or its password set again) on
   * every start and made owner of both databases and of everything in them, so postgresUrl's
   * superuser is used for that only. Omitted: everything connects as postgresUrl's role.
   */
  serverRole?: { name: string; password: string };
  /** Workflow state; `temporal` by default. */
  databaseName?: string;
  /** Visibility index; `temporal_visibility` by default. */
  visibilityDatabaseName?: string;
  namespace?: string;
  /** Closed workflows are kept this long (30 days by default, as the compose file's namespace). */
  namespaceRetentionHours?: number;
  /** Fixed when the databases are first used; {@link defaultNumHistoryShards} by default. */
  numHistoryShards?: number;
  /** Where the server's and the schema tool's output are appended. */
  logFilePath?: string;
  /** Schema setup, server start, namespace and search attributes together. */
  startTimeoutMs?: number;
  /** How long SIGTERM may take before SIGKILL. */
  stopTimeoutMs?: number;
  /** Custom search attributes to register (name -> kind): the program's, given by its caller (src/runtime/local-stack.ts). */
  searchAttributes: Readonly<Record<string, SearchAttributeKind>>;
  /** Where scripts/install-temporal-server.sh installed the server; TEMPORAL_SERVER_DIR or .tools/temporal-server by default. */
  installDir?: string;
  /** Serve Prometheus metrics on this port of 127.0.0.1 (none by default); the bench reads the server's own request counts there. */
  metricsPort?: number;
  /**
   * The frontend's gRPC port (below 32768), for a server restarted where its clients already point
   * (the chaos run); a free one when omitted. The other services' ports are always picked afresh.
   */
  frontendPort?: number;
  /** mTLS on the frontend (clients must present a certificate the CA signed); plaintext by default. */
  tls?: TemporalClusterTls;
  /**
   * Start without removing this host's membership rows of an earlier server (see
   * temporal-cluster-membership.ts): only for measuring the stall that removal avoids (the chaos
   * run's A/B). False by default.
   */
  keepStaleMembership?: boolean;
}

export interface TemporalCluster {
  /** Frontend host:port for Connection.connect / NativeConnection.connect. */
  address: string;
  /** Milliseconds each phase of the start took: schema, server, namespace. */
  startTimings: Readonly<Record<'schemaMs' | 'serverMs' | 'namespaceMs', number>>;
  /** The server process, for CPU and memory readings. */
  pid: number;
  /** Prometheus endpoint when metricsPort was given, else null. */
  metricsUrl: string | null;
  /** Resolves when the server process exits, stopped or not (a supervisor restarts it). */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stop(): Promise<void>;
}

const host = '127.0.0.1';
const defaultDatabaseName = 'temporal';
const defaultVisibilityDatabaseName = 'temporal_visibility';
const defaultNamespaceRetentionHours = 30 * 24;
// A cold start applies ~30 schema versions to two databases before the server starts.
const defaultStartTimeoutMs = 120_000;
const defaultStopTimeoutMs = 15_000;
const maxPortRaceAttempts = 3;
/** Persistence connections the server's main pool may open; the ledger needs the rest of max_connections (200). */
const maxPersistenceConnections = 20;

class StartFailure extends Error {
  constructor(
    message: string,
    /** A port we picked was taken before the server bound it: retrying with fresh ports may work. */
    readonly pickedPortTaken: boolean,
  ) {
    super(message);
  }
}

/**
 * Starts the real Temporal server (all four services in one process, see
 * temporal-cluster-config.ts) persisted to PostgreSQL: creates its two databases if missing,
 * brings their schemas to the installed version with the server's own schema tool, starts the
 * server on free ports, and resolves once the namespace exists with the charge search attributes.
 */
export async function startTemporalCluster(opts: TemporalClusterOptions): Promise<TemporalCluster> {
  const paths = resolveTemporalServerInstall(opts.installDir);
  const deadlineMs = Date.now() + (opts.startTimeoutMs ?? defaultStartTimeoutMs);
  const workDir = resolve(opts.workDir);
  await mkdir(join(workDir, 'config'), { recursive: true });
  const admin = parsePostgresUrl(opts.postgresUrl);
  const postgres = opts.serverRole === undefined ? admin : { ...admin, user: opts.serverRole.name, password: opts.serverRole.password };
  const databases = {
    main: opts.databaseName ?? defaultDatabaseName,
    visibility: opts.visibilityDatabaseName ?? defaultVisibilityDatabaseName,
  };
  const sink = new LogSink(opts.logFilePath);

  const schemaStartedMs = Date.now();
  try {
    await createDatabasesIfMissing(opts.postgresUrl, [databases.main, databases.visibility]);
    if (opts.serverRole !== undefined) await provisionServerRole(opts.postgresUrl, opts.serverRole, [databases.main, databases.visibility]);
    await setUpSchema(paths, postgres, databases.main, paths.temporalSchemaDir, sink);
    await setUpSchema(paths, postgres, databases.visibility, paths.visibilitySchemaDir, sink);
  } catch (err) {
    await sink.close();
    throw new Error(`Temporal cluster: schema setup on ${postgres.host}:${postgres.port} failed: ${(err as Error).message}`);
  }
  const schemaMs = Date.now() - schemaStartedMs;

  for (let attempt = 1; ; attempt++) {
    try {
      return await startServerOnce({ opts, paths, workDir, postgres, databases, sink, deadlineMs, schemaMs });
    } catch (err) {
      const retry = err instanceof StartFailure && err.pickedPortTaken && attempt < maxPortRaceAttempts && Date.now() < deadlineMs;
      if (!retry) {
        await sink.close();
        throw err;
      }
      sink.note(`a picked port was taken before the server bound it; retrying with fresh ports`);
    }
  }
}

async function startServerOnce(p: {
  opts: TemporalClusterOptions;
  paths: ServerPaths;
  workDir: string;
  postgres: ReturnType<typeof parsePostgresUrl>;
  databases: { main: string; visibility: string };
  sink: LogSink;
  deadlineMs: number;
  schemaMs: number;
}): Promise<TemporalCluster> {
  const { opts, sink, deadlineMs } = p;
  const namespace = opts.namespace ?? 'default';
  const stopTimeoutMs = opts.stopTimeoutMs ?? defaultStopTimeoutMs;
  const free = await findFreePortsBelow(temporalServiceNames.length * 2, smallintPortCeiling);
  const ports = Object.fromEntries(
    temporalServiceNames.map((name, i) => [name, { grpcPort: free[2 * i]!, membershipPort: free[2 * i + 1]! }]),
  ) as Record<TemporalServiceName, TemporalServicePorts>;
  if (opts.frontendPort !== undefined) {
    if (!Number.isInteger(opts.frontendPort) || opts.frontendPort < 1 || opts.frontendPort > smallintPortCeiling) {
      throw new Error(`frontendPort ${opts.frontendPort} must be an integer port at most ${smallintPortCeiling} (the server stores ports as SMALLINT)`);
    }
    ports.frontend = { ...ports.frontend, grpcPort: opts.frontendPort };
  }

  const dynamicConfigFilePath = join(p.workDir, 'dynamicconfig.yaml');
  await writeFile(dynamicConfigFilePath, renderConfigFile(temporalClusterDynamicConfig()));
  const config = temporalClusterConfig({
    host,
    ports,
    postgres: p.postgres,
    databaseName: p.databases.main,
    visibilityDatabaseName: p.databases.visibility,
    numHistoryShards: opts.numHistoryShards ?? defaultNumHistoryShards,
    dynamicConfigFilePath,
    logLevel: 'warn',
    maxPersistenceConnections,
    metricsListenAddress: opts.metricsPort === undefined ? undefined : `${host}:${opts.metricsPort}`,
    ...(opts.tls === undefined ? {} : { tls: opts.tls }),
  });
  // 0600: it holds the database password.
  await writeFile(join(p.workDir, 'config', 'development.yaml'), renderConfigFile(config), { mode: 0o600 });

  const lockPath = join(p.workDir, 'server.json');
  await reclaimServerLock(lockPath, {
    what: `Temporal cluster config ${p.workDir}`,
    stopSignal: 'SIGTERM',
    graceMs: stopTimeoutMs,
    log: (line) => sink.note(line),
  });
  if (opts.keepStaleMembership !== true) {
    const removed = await removeStaleMembership(p.postgres, p.databases.main, host);
    if (removed > 0) sink.note(`removed ${removed} membership rows of this host's previous server (see temporal-cluster-membership.ts)`);
  }
  const args = ['--root', p.workDir, '--config', 'config', '--env', 'development', '--allow-no-auth', 'start'];
  sink.note(`starting ${p.paths.serverBin} ${args.join(' ')}`);
  const serverStartedMs = Date.now();
  const child = spawn(p.paths.serverBin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const serverGone = new AbortController();
  let spawnError: Error | null = null;
  child.on('error', (err) => {
    spawnError = err;
    sink.note(`spawn error: ${err.message}`);
    serverGone.abort();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolveExit) => {
    child.on('exit', (code, signal) => {
      sink.note(`server exited (code ${code ?? 'null'}, signal ${signal ?? 'null'})`);
      serverGone.abort();
      // The lock names this process as the owner, which is alive: a start after a crash (the
      // supervisor's) would take it for a server still in use. Gone with the server, then.
      void removeServerLock(lockPath)
        .catch((error: unknown) => sink.note(`removing the server lock failed: ${(error as Error).message}`))
        .finally(() => resolveExit({ code, signal }));
    });
  });
  child.stdout?.on('data', (chunk: Buffer) => sink.write(chunk));
  child.stderr?.on('data', (chunk: Buffer) => sink.write(chunk));
  const removeExitHook = killOnParentExit(child);
  const address = `${host}:${ports.frontend.grpcPort}`;

  let serverMs = 0;
  let namespaceMs = 0;
  try {
    if (child.pid !== undefined) await writeServerLock(lockPath, child.pid);
    const tls = await clientTlsFor(opts.tls);
    await waitUntilServing({ child, address, port: ports.frontend.grpcPort, deadlineMs, serverGone: serverGone.signal, spawnError: () => spawnError, tls });
    serverMs = Date.now() - serverStartedMs;
    const namespaceStartedMs = Date.now();
    await ensureNamespace({
      address,
      namespace,
      retentionHours: opts.namespaceRetentionHours ?? defaultNamespaceRetentionHours,
      searchAttributes: opts.searchAttributes,
      deadlineMs,
      serverGone: serverGone.signal,
      tls,
    });
    namespaceMs = Date.now() - namespaceStartedMs;
  } catch (err) {
    await terminate(child, { signal: 'SIGTERM', graceMs: stopTimeoutMs }).catch((stopErr: unknown) =>
      sink.note(`stopping the server that failed to start failed: ${(stopErr as Error).message}`),
    );
    removeExitHook();
    await removeServerLock(lockPath);
    const tail = sink.tail();
    const chosen = new Set(Object.values(ports).flatMap((s) => [s.grpcPort, s.membershipPort]));
    throw new StartFailure(
      `Temporal server (${p.paths.serverBin}) failed to start on ${address}: ${(err as Error).message}` +
        (opts.logFilePath ? ` (full log: ${opts.logFilePath})` : '') +
        (tail ? `\n--- last server output ---\n${tail}` : ''),
      /address already in use/i.test(tail) && [...tail.matchAll(/:(\d+): bind: address already in use/g)].some((m) => chosen.has(Number(m[1]))),
    );
  }

  let stopping: Promise<void> | null = null;
  return {
    address,
    startTimings: { schemaMs: p.schemaMs, serverMs, namespaceMs },
    // Serving means the process started, so it has a pid.
    pid: child.pid!,
    metricsUrl: opts.metricsPort === undefined ? null : `http://${host}:${opts.metricsPort}/metrics`,
    exited,
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
