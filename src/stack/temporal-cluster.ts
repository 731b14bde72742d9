import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { Connection, type TLSConfig } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time.js';
import pg from 'pg';
import { hasExited, killOnParentExit, terminate } from './child-process.js';
import { LogSink } from './log-sink.js';
import { repoRoot } from './repo-root.js';
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
import { chargeSearchAttributes, indexedValueTypeByKind, type SearchAttributeKind } from './temporal-dev-server.js';
import { isPortAccepting, pollUntil } from './wait.js';

const execFileAsync = promisify(execFile);

// gRPC status codes (grpc-js is not a direct dependency; the numbers are the gRPC spec's).
const grpcNotFound = 5;
const grpcAlreadyExists = 6;

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
  /** Defaults to {@link chargeSearchAttributes}. */
  searchAttributes?: Readonly<Record<string, SearchAttributeKind>>;
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
  stop(): Promise<void>;
}

const host = '127.0.0.1';
const defaultDatabaseName = 'temporal';
const defaultVisibilityDatabaseName = 'temporal_visibility';
const defaultNamespaceRetentionHours = 30 * 24;
// A cold start applies ~30 schema versions to two databases before the server starts.
const defaultStartTimeoutMs = 120_000;
const defaultStopTimeoutMs = 15_000;
/** One schema tool command (setup-schema or update-schema of one database). */
const schemaToolTimeoutMs = 60_000;
const maxPortRaceAttempts = 3;
/**
 * The server records each service's ports in cluster_membership.rpc_port, a SMALLINT: a port above
 * 32767 makes the membership heartbeat fail and the server exit. The kernel's ephemeral range
 * (where port 0 binds) starts at 32768 on Linux, so the ports are picked by hand below it.
 */
export const smallintPortCeiling = 32_767;
const lowestPickedPort = 20_000;
/** Persistence connections the server's main pool may open; the ledger needs the rest of max_connections (200). */
const maxPersistenceConnections = 20;

interface ServerPaths {
  serverBin: string;
  sqlToolBin: string;
  temporalSchemaDir: string;
  visibilitySchemaDir: string;
}

/** Locates the binaries and schema files installed by scripts/install-temporal-server.sh. */
export function resolveTemporalServerInstall(installDir?: string): ServerPaths {
  const fromEnv = process.env.TEMPORAL_SERVER_DIR;
  const dir = resolve(installDir ?? (fromEnv !== undefined && fromEnv.trim() !== '' ? fromEnv : join(repoRoot(), '.tools', 'temporal-server')));
  const paths: ServerPaths = {
    serverBin: join(dir, 'bin', 'temporal-server'),
    sqlToolBin: join(dir, 'bin', 'temporal-sql-tool'),
    temporalSchemaDir: join(dir, 'schema', 'postgresql', 'v12', 'temporal', 'versioned'),
    visibilitySchemaDir: join(dir, 'schema', 'postgresql', 'v12', 'visibility', 'versioned'),
  };
  for (const path of [paths.serverBin, paths.sqlToolBin, paths.temporalSchemaDir, paths.visibilitySchemaDir]) {
    try {
      accessSync(path, constants.R_OK);
    } catch {
      throw new Error(
        `Temporal server not installed: ${path} is missing. Run \`npm run setup\` (scripts/install-temporal-server.sh builds it into .tools/temporal-server), or set TEMPORAL_SERVER_DIR.`,
      );
    }
  }
  return paths;
}

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
  child.on('exit', (code, signal) => {
    sink.note(`server exited (code ${code ?? 'null'}, signal ${signal ?? 'null'})`);
    serverGone.abort();
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
      searchAttributes: opts.searchAttributes ?? chargeSearchAttributes,
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
 * `count` distinct ports in [lowestPickedPort, ceiling] that are free on `host` right now: random
 * candidates are bound one by one and all held until the set is complete, then released. Another
 * process may still take one before the server binds it; the caller retries on "address in use".
 */
export async function findFreePortsBelow(count: number, ceiling: number): Promise<number[]> {
  const held: Server[] = [];
  const ports = new Set<number>();
  const maxCandidates = count * 50;
  try {
    for (let tried = 0; ports.size < count && tried < maxCandidates; tried++) {
      const candidate = lowestPickedPort + Math.floor(Math.random() * (ceiling - lowestPickedPort + 1));
      if (ports.has(candidate)) continue;
      const server = await listenOn(candidate).catch(() => null);
      if (server === null) continue;
      held.push(server);
      ports.add(candidate);
    }
    if (ports.size < count) throw new Error(`found only ${ports.size} of ${count} free ports between ${lowestPickedPort} and ${ceiling}`);
    return [...ports];
  } finally {
    await Promise.all(held.map((server) => new Promise<void>((done) => server.close(() => done()))));
  }
}

function listenOn(port: number): Promise<Server> {
  return new Promise<Server>((resolveListen, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen({ host, port, exclusive: true }, () => resolveListen(server));
  });
}

function parsePostgresUrl(url: string): { host: string; port: number; user: string; password: string } {
  const parsed = new URL(url);
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw new Error(`Temporal cluster: postgresUrl must be a postgres:// URL, got ${parsed.protocol}`);
  }
  return {
    host: parsed.hostname,
    port: parsed.port === '' ? 5432 : Number(parsed.port),
    user: decodeURIComponent(parsed.username),
    password: decodeURIComponent(parsed.password),
  };
}

async function createDatabasesIfMissing(postgresUrl: string, names: readonly string[]): Promise<void> {
  const url = new URL(postgresUrl);
  url.pathname = '/postgres';
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    for (const name of names) {
      const found = await client.query('select 1 from pg_database where datname = $1', [name]);
      if (found.rowCount === 0) await client.query(`create database ${client.escapeIdentifier(name)}`);
    }
  } finally {
    await client.end();
  }
}

/**
 * The server's role owns its two databases and everything in them, as a deployment's `temporal`
 * user does: the schema tool creates tables as it, and databases an earlier start filled as the
 * superuser are handed over object by object (REASSIGN OWNED cannot move a superuser's objects).
 */
async function provisionServerRole(adminUrl: string, role: { name: string; password: string }, databases: readonly string[]): Promise<void> {
  const url = new URL(adminUrl);
  url.pathname = '/postgres';
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    const name = client.escapeIdentifier(role.name);
    const exists = await client.query('select 1 from pg_roles where rolname = $1', [role.name]);
    const verb = exists.rowCount === 0 ? 'create' : 'alter';
    await client.query(`${verb} role ${name} login nosuperuser nocreatedb nocreaterole password ${client.escapeLiteral(role.password)}`);
    for (const database of databases) await client.query(`alter database ${client.escapeIdentifier(database)} owner to ${name}`);
  } finally {
    await client.end();
  }
  for (const database of databases) {
    url.pathname = `/${encodeURIComponent(database)}`;
    const db = new pg.Client({ connectionString: url.toString() });
    await db.connect();
    try {
      const owned = await db.query<{ kind: string; name: string }>(
        `select case c.relkind when 'S' then 'sequence' when 'v' then 'view' when 'm' then 'materialized view' else 'table' end as kind,
                c.relname as name
           from pg_class c join pg_namespace n on n.oid = c.relnamespace
          where n.nspname = 'public' and c.relkind in ('r', 'p', 'v', 'm', 'S')
            and pg_get_userbyid(c.relowner) <> $1
            -- A sequence owned by a column follows its table.
            and not (c.relkind = 'S' and exists (select 1 from pg_depend d where d.objid = c.oid and d.deptype in ('a', 'i')))`,
        [role.name],
      );
      for (const row of owned.rows) {
        await db.query(`alter ${row.kind} public.${db.escapeIdentifier(row.name)} owner to ${db.escapeIdentifier(role.name)}`);
      }
    } finally {
      await db.end();
    }
  }
}

/**
 * The server's own schema tool, as upstream's setup does on every start: `setup-schema -v 0.0`
 * creates the version bookkeeping (a no-op when present), `update-schema` applies every versioned
 * step newer than the database's. Safe to run again; an upgrade of the server is an upgrade here.
 */
async function setUpSchema(
  paths: ServerPaths,
  postgres: ReturnType<typeof parsePostgresUrl>,
  database: string,
  versionedDir: string,
  sink: LogSink,
): Promise<void> {
  const newest = await newestSchemaVersion(versionedDir);
  const current = await currentSchemaVersion(postgres, database);
  if (current === newest) {
    sink.note(`${database}: schema at ${current}, the newest the installed server ships; nothing to apply`);
    return;
  }
  const base = ['--plugin', 'postgres12', '--ep', postgres.host, '-p', String(postgres.port), '-u', postgres.user, '--db', database];
  // The password goes through the tool's SQL_PASSWORD variable: it stays off the command line (ps).
  const env = { ...process.env, SQL_PASSWORD: postgres.password };
  for (const command of [
    ['setup-schema', '-v', '0.0'],
    ['update-schema', '-d', versionedDir],
  ]) {
    sink.note(`temporal-sql-tool ${[...base, ...command].join(' ')}`);
    try {
      const { stdout, stderr } = await execFileAsync(paths.sqlToolBin, [...base, ...command], { env, timeout: schemaToolTimeoutMs });
      sink.write(stdout);
      sink.write(stderr);
    } catch (err) {
      const failed = err as Error & { stdout?: string; stderr?: string };
      sink.write(failed.stdout ?? '');
      sink.write(failed.stderr ?? '');
      throw new Error(`temporal-sql-tool ${command[0]} on ${database} failed: ${failed.message.split('\n')[0]}\n${lastLines(failed.stderr ?? failed.stdout ?? '', 10)}`);
    }
  }
}

/** The highest `vX.Y` folder of the installed schema, as "X.Y" (what the schema tool records). */
async function newestSchemaVersion(versionedDir: string): Promise<string> {
  const versions = (await readdir(versionedDir))
    .map((name) => /^v(\d+)\.(\d+)$/.exec(name))
    .flatMap((m) => (m === null ? [] : [[Number(m[1]), Number(m[2])] as const]))
    .sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const last = versions.at(-1);
  if (last === undefined) throw new Error(`no vX.Y schema folders in ${versionedDir}`);
  return `${last[0]}.${last[1]}`;
}

/**
 * The version the schema tool recorded in the database (its own schema_version table), or null
 * when it never ran there. Only an exact match with the newest installed version skips the tool:
 * the four tool runs cost seconds on every start.
 */
async function currentSchemaVersion(postgres: ReturnType<typeof parsePostgresUrl>, database: string): Promise<string | null> {
  const client = new pg.Client({ host: postgres.host, port: postgres.port, user: postgres.user, password: postgres.password, database });
  await client.connect();
  try {
    const table = await client.query<{ present: boolean }>(`select to_regclass('public.schema_version') is not null as present`);
    if (table.rows[0]?.present !== true) return null;
    const row = await client.query<{ curr_version: string }>('select curr_version from schema_version where version_partition = 0 and db_name = $1', [database]);
    return row.rows[0]?.curr_version ?? null;
  } finally {
    await client.end();
  }
}

async function waitUntilServing(p: {
  child: ChildProcess;
  address: string;
  port: number;
  deadlineMs: number;
  serverGone: AbortSignal;
  spawnError: () => Error | null;
  tls: TLSConfig | undefined;
}): Promise<void> {
  const died = (): boolean => p.serverGone.aborted || hasExited(p.child);
  const diedError = (): Error =>
    p.spawnError() ?? new Error(`server process exited early (code ${p.child.exitCode ?? 'null'}, signal ${p.child.signalCode ?? 'null'})`);
  const portOpen = await pollUntil(() => isPortAccepting(p.port, host), { deadlineMs: p.deadlineMs, intervalMs: 200, signal: p.serverGone });
  if (died()) throw diedError();
  if (!portOpen.ok) throw new Error(`gRPC port ${p.port} did not accept connections before the deadline`);
  // The frontend listens before history and matching have joined the membership ring; the
  // system namespace answering means persistence and the ring are up.
  const serving = await pollUntil(
    () =>
      withConnection(p.address, p.deadlineMs, async (connection) => {
        await connection.withDeadline(p.deadlineMs, () => connection.workflowService.getSystemInfo({}));
        await connection.withDeadline(p.deadlineMs, () => connection.workflowService.describeNamespace({ namespace: 'temporal-system' }));
        return true;
      }, p.tls),
    { deadlineMs: p.deadlineMs, intervalMs: 250, signal: p.serverGone },
  );
  if (died()) throw diedError();
  if (!serving.ok) throw new Error(`frontend did not answer before the deadline: ${describe(serving.lastError)}`);
}

/**
 * Unlike the dev server, the real server creates no `default` namespace: register it, then the
 * charge search attributes. On SQL visibility a custom attribute is a per-namespace alias of a
 * pre-made column, so it becomes usable once the frontend's namespace cache refreshes: the wait
 * ends when the frontend lists every attribute, so a worker's start check passes right away.
 */
async function ensureNamespace(p: {
  address: string;
  namespace: string;
  retentionHours: number;
  searchAttributes: Readonly<Record<string, SearchAttributeKind>>;
  deadlineMs: number;
  serverGone: AbortSignal;
  tls: TLSConfig | undefined;
}): Promise<void> {
  await withConnection(p.address, p.deadlineMs, async (connection) => {
    const exists = await connection
      .withDeadline(p.deadlineMs, () => connection.workflowService.describeNamespace({ namespace: p.namespace }))
      .then(
        () => true,
        (err: unknown) => {
          if ((err as { code?: number }).code === grpcNotFound) return false;
          throw err;
        },
      );
    if (!exists) {
      await connection
        .withDeadline(p.deadlineMs, () =>
          connection.workflowService.registerNamespace({
            namespace: p.namespace,
            description: 'chargeguard charges',
            workflowExecutionRetentionPeriod: msToTs(p.retentionHours * 3_600_000),
          }),
        )
        .catch((err: unknown) => {
          // Two starts racing on the same databases: the other one registered it.
          if ((err as { code?: number }).code !== grpcAlreadyExists) throw err;
        });
    }
  }, p.tls);

  const wanted = Object.entries(p.searchAttributes);
  if (wanted.length === 0) return;
  let wrongType: WrongSearchAttributeType | null = null;
  const listed = await pollUntil(
    () =>
      withConnection(p.address, p.deadlineMs, async (connection) => {
        const existing = await connection.withDeadline(p.deadlineMs, () => connection.operatorService.listSearchAttributes({ namespace: p.namespace }));
        const custom = existing.customAttributes ?? {};
        const missing: Record<string, number> = {};
        for (const [name, kind] of wanted) {
          const actual = custom[name];
          if (actual === undefined || actual === null) missing[name] = indexedValueTypeByKind[kind];
          else if (Number(actual) !== indexedValueTypeByKind[kind]) {
            wrongType = new WrongSearchAttributeType(`search attribute ${name} exists on namespace ${p.namespace} with type ${String(actual)}, but ${kind} is required`);
            throw wrongType;
          }
        }
        if (Object.keys(missing).length === 0) return true;
        await connection.withDeadline(p.deadlineMs, () =>
          connection.operatorService.addSearchAttributes({ namespace: p.namespace, searchAttributes: missing }),
        );
        return false;
      }, p.tls),
    { deadlineMs: p.deadlineMs, intervalMs: 250, signal: p.serverGone, shouldAbort: () => wrongType !== null },
  );
  if (wrongType !== null) throw wrongType;
  if (!listed.ok) throw new Error(`namespace ${p.namespace} did not list the charge search attributes before the deadline: ${describe(listed.lastError)}`);
}

class WrongSearchAttributeType extends Error {}

/**
 * How the stack itself reaches an mTLS frontend (readiness, namespace, search attributes): with the
 * server's own certificate, which allows client authentication (see TemporalClusterTls).
 */
async function clientTlsFor(tls: TemporalClusterTls | undefined): Promise<TLSConfig | undefined> {
  if (tls === undefined) return undefined;
  const [crt, key, ca] = await Promise.all([readFile(tls.certPath), readFile(tls.keyPath), readFile(tls.caPath)]);
  return { serverNameOverride: tls.serverName, serverRootCACertificate: ca, clientCertPair: { crt, key } };
}

async function withConnection<T>(
  address: string,
  deadlineMs: number,
  fn: (connection: Connection) => Promise<T>,
  tls: TLSConfig | undefined,
): Promise<T> {
  const connectTimeoutMs = Math.max(1, Math.min(5_000, deadlineMs - Date.now()));
  // Not Connection.connect(): a failed connect leaves its channel open (see temporal-dev-server.ts).
  const connection = Connection.lazy({ address, connectTimeout: connectTimeoutMs, ...(tls ? { tls } : {}) });
  try {
    await connection.ensureConnected();
    return await fn(connection);
  } finally {
    await connection.close();
  }
}

function lastLines(text: string, count: number): string {
  return text.trim().split('\n').slice(-count).join('\n');
}

function describe(err: unknown): string {
  if (err === undefined) return 'no response';
  return err instanceof Error ? err.message : String(err);
}
