import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { maskUrlPassword } from '../support/redact.js';
import type { SearchAttributeKind } from '../support/search-attribute-kinds.js';
import { reclaimOrphanedPostgres, startEmbeddedPostgres, type DatabaseRoles, type EmbeddedPostgres } from './embedded-postgres.js';
import { ensurePasswords } from './postgres-credentials.js';
import { startOnRememberedPort } from './remembered-ports.js';
import { reniceServer } from './server-niceness.js';
import { Supervisor } from './supervisor.js';
import { smallintPortCeiling, startTemporalCluster, type TemporalCluster, type TemporalClusterOptions } from './temporal-cluster.js';
import { reclaimOrphanedDevServer, startTemporalDevServer } from './temporal-dev-server.js';

/**
 * What the program run on the stack needs of it, handed in by the composition root
 * (src/runtime/local-stack.ts): the stack starts processes and imports none of the program.
 */
export interface StackNeeds {
  /** Custom search attributes registered on the Temporal it starts (name -> kind). */
  searchAttributes: Readonly<Record<string, SearchAttributeKind>>;
  /** The roles every embedded PostgreSQL it starts provisions. */
  databaseRoles: DatabaseRoles;
  /** Finds, or generates on the first start, the payload key file in the data dir. */
  ensurePayloadKeyFile(dataDir: string): Promise<{ path: string; created: boolean }>;
}

export interface LocalStackOptions {
  needs: StackNeeds;
  /** Root for everything the stack persists: temporal.sqlite, postgres/, logs/. */
  dataDir: string;
  log?: (line: string) => void;
  /** Temporal Web UI port; 8233 by default (docs/contract.md, Running). null runs without UI. */
  temporalUiPort?: number | null;
  /**
   * Dev shape: the codec endpoint (the API's /codec) the dev server's Web UI decodes payloads with.
   * The cluster shape's UI is started beside the API processes (src/stack/temporal-ui-server.ts).
   */
  temporalUiCodecEndpoint?: string;
  /**
   * Which Temporal to start when TEMPORAL_ADDRESS is unset: `dev`, the CLI's dev server on SQLite;
   * `cluster`, the real server on the embedded PostgreSQL (docs/operations.md, Running on a
   * cluster). CHARGEGUARD_TEMPORAL by default, else `dev`.
   */
  temporal?: TemporalKind;
  /**
   * Cluster shape only: restart the embedded PostgreSQL and the Temporal server when they exit on
   * their own (src/stack/supervisor.ts), on the same ports, saying so through `log`. Off by default.
   */
  supervise?: boolean;
  /**
   * Niceness of the embedded servers (PostgreSQL, Temporal) and all they fork, set once each has
   * started, restarts included (src/stack/server-niceness.ts; 0-19): on a host they share with the
   * API, the API goes first for the CPU. 0 (the default) leaves them as started; external servers
   * are never touched.
   */
  serverNiceness?: number;
}

export type TemporalKind = 'dev' | 'cluster';

export interface LocalStack {
  temporalAddress: string;
  /** The app role's URL (rows and ledger functions only); what the service connects with. */
  databaseUrl: string;
  /** The schema owner's URL, for migrations (DATABASE_URL again when MIGRATION_DATABASE_URL is not set). */
  migrationDatabaseUrl: string;
  /** The embedded server's superuser (tests' scratch databases); null with an external DATABASE_URL. */
  adminDatabaseUrl: string | null;
  /** The embedded server's password file (PGPASSFILE) for the two roles; null with an external DATABASE_URL. */
  passwordFilePath: string | null;
  temporalUiUrl: string | null;
  /**
   * The payload key file of an embedded Temporal, generated in the data dir on first start
   * (src/codec/payload-key-file.ts, through StackNeeds); null with TEMPORAL_ADDRESS, whose deployment brings its own keys.
   */
  payloadKeysFilePath: string | null;
  /** What serves temporalAddress: one the stack started, or TEMPORAL_ADDRESS's. */
  temporalKind: TemporalKind | 'external';
  /** With supervise: rejects when a supervisor gives up on a crash-looping server; never settles otherwise. */
  supervisionGaveUp: Promise<never>;
  stop(): Promise<void>;
}

interface Service<T> {
  value: T;
  stop(): Promise<void>;
}

const defaultTemporalUiPort = 8233;

/**
 * Brings up what the worker and API need: a Temporal dev server persisted to SQLite and an
 * embedded PostgreSQL, both under `dataDir`, started in parallel; or, with `temporal: 'cluster'`,
 * the PostgreSQL first and the real Temporal server on it. TEMPORAL_ADDRESS / DATABASE_URL point
 * at existing infrastructure instead, and then nothing is started for that half.
 */
export async function startLocalStack(opts: LocalStackOptions): Promise<LocalStack> {
  const dataDir = resolve(opts.dataDir);
  const logsDir = join(dataDir, 'logs');
  const log = opts.log ?? (() => undefined);
  const temporalKind = opts.temporal ?? temporalKindFromEnv();
  const needs = opts.needs;
  const niceness = opts.serverNiceness ?? 0;
  if (!Number.isInteger(niceness) || niceness < 0 || niceness > 19) throw new RangeError(`serverNiceness must be a whole number from 0 to 19, not ${niceness}`);
  if (temporalKind === 'cluster' && nonEmptyEnv('TEMPORAL_ADDRESS') === null) return startClusterStack(dataDir, logsDir, log, opts.supervise === true, needs, niceness);

  // Beside the Temporal database whose payloads it encrypts; before anything starts, so a key file
  // that is not one stops the start with nothing to clean up.
  const payloadKeys = nonEmptyEnv('TEMPORAL_ADDRESS') === null ? await payloadKeyFileFor(dataDir, needs, log) : null;
  const temporalStart = startTemporal(dataDir, logsDir, { uiPort: opts.temporalUiPort, uiCodecEndpoint: opts.temporalUiCodecEndpoint }, needs, log, niceness);
  const postgresStart = startPostgres(dataDir, logsDir, needs, log, niceness);
  const [temporal, postgres] = await Promise.allSettled([temporalStart, postgresStart]);

  if (temporal.status === 'rejected' || postgres.status === 'rejected') {
    // Do not leave the half that did come up running.
    const started = [temporal, postgres].flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    await Promise.allSettled(started.map((service) => service.stop()));
    const errors = [temporal, postgres].flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    throw errors.length === 1 ? errors[0] : new AggregateError(errors, errors.map((e) => (e as Error).message).join('\n\n'));
  }

  let stopping: Promise<void> | null = null;
  return {
    temporalAddress: temporal.value.value.address,
    temporalUiUrl: temporal.value.value.uiUrl,
    temporalKind: nonEmptyEnv('TEMPORAL_ADDRESS') === null ? 'dev' : 'external',
    supervisionGaveUp: never,
    payloadKeysFilePath: payloadKeys,
    ...postgres.value.value,
    stop: () => {
      stopping ??= (async () => {
        const results = await Promise.allSettled([temporal.value.stop(), postgres.value.stop()]);
        const errors = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
        if (errors.length > 0) throw new AggregateError(errors, 'Failed to stop the local stack cleanly');
        log('local stack stopped');
      })();
      return stopping;
    },
  };
}

async function startTemporal(
  dataDir: string,
  logsDir: string,
  ui: { uiPort: number | null | undefined; uiCodecEndpoint: string | undefined },
  needs: StackNeeds,
  log: (line: string) => void,
  niceness: number,
): Promise<Service<{ address: string; uiUrl: string | null }>> {
  const external = nonEmptyEnv('TEMPORAL_ADDRESS');
  if (external !== null) {
    log(`temporal: using TEMPORAL_ADDRESS=${external}`);
    return { value: { address: external, uiUrl: null }, stop: async () => undefined };
  }
  const startedAtMs = Date.now();
  const logFilePath = join(logsDir, 'temporal.log');
  // The frontend listens where it did on the last start of this data dir (remembered-ports.ts), so
  // TEMPORAL_ADDRESS as printed then still holds; UI port 0 asks for any free one.
  const server = await startOnRememberedPort({
    dataDir,
    name: 'temporal',
    start: (port) =>
      startTemporalDevServer({
        dbFilePath: join(dataDir, 'temporal.sqlite'),
        searchAttributes: needs.searchAttributes,
        ...(port === undefined ? {} : { port }),
        ...(ui.uiPort === 0 ? {} : { uiPort: ui.uiPort === undefined ? defaultTemporalUiPort : ui.uiPort }),
        ...(ui.uiCodecEndpoint === undefined ? {} : { uiCodecEndpoint: ui.uiCodecEndpoint }),
        logFilePath,
        niceness,
        log,
      }),
    portOf: (started) => Number(started.address.split(':').at(-1)),
    log,
    reclaimOrphan: () => reclaimOrphanedDevServer(join(dataDir, 'temporal.sqlite'), (line) => log(`temporal: ${line}`)),
  });
  log(
    `temporal: dev server ready at ${server.address}` +
      (server.uiUrl ? `, Web UI ${server.uiUrl}` + (ui.uiCodecEndpoint === undefined ? '' : ` decoding through ${ui.uiCodecEndpoint}`) : '') +
      ` (${Date.now() - startedAtMs} ms, log ${logFilePath})`,
  );
  return {
    value: { address: server.address, uiUrl: server.uiUrl },
    stop: async () => {
      const stopStartedAtMs = Date.now();
      await server.stop();
      log(`temporal: dev server stopped (${Date.now() - stopStartedAtMs} ms)`);
    },
  };
}

/**
 * The cluster shape: the ledger's PostgreSQL and Temporal's own (its two databases) first, then the
 * Temporal server on its own; stopped in the reverse order, so the server can still write while it
 * shuts down.
 *
 * Two PostgreSQL servers, not one, because a crash of a shared one takes Temporal's persistence down
 * with the ledger, and Temporal server 1.29.1 comes back from that slowly: its SQL handle reconnects
 * at most once a second and its queues reschedule the tasks that failed from 1 s on (both hard-coded),
 * so charges caught by a crash waited up to 4.9 s for their first workflow task; with Temporal's
 * database apart, a ledger crash decided every charge in flight within 0.8 s (docs/chaos.md). A data
 * dir made before the split keeps Temporal on the ledger's server, where its history is.
 */
async function startClusterStack(dataDir: string, logsDir: string, log: (line: string) => void, supervise: boolean, needs: StackNeeds, niceness: number): Promise<LocalStack> {
  // Refused before anything starts: the cluster shape owns the ledger's server as well as Temporal's.
  if (nonEmptyEnv('DATABASE_URL') !== null) {
    throw new Error(
      'CHARGEGUARD_TEMPORAL=cluster starts its own PostgreSQL servers (the ledger\'s and Temporal\'s), but DATABASE_URL names an external one: ' +
        'point TEMPORAL_ADDRESS at your Temporal cluster instead, or unset DATABASE_URL',
    );
  }
  const payloadKeys = await payloadKeyFileFor(dataDir, needs, log);
  const temporalShared = existsSync(join(dataDir, 'temporal-cluster')) && !existsSync(join(dataDir, temporalPostgresName));
  if (temporalShared) log(`temporal: this data dir keeps Temporal's databases on the ledger's PostgreSQL (made before they were apart); a new data dir gives Temporal its own`);
  const [postgresStart, temporalPostgresStart] = await Promise.allSettled([
    startPostgres(dataDir, logsDir, needs, log, niceness, supervise),
    temporalShared ? Promise.resolve(null) : startPostgres(dataDir, logsDir, needs, log, niceness, supervise, { name: temporalPostgresName, external: false }),
  ]);
  if (postgresStart.status === 'rejected' || temporalPostgresStart.status === 'rejected') {
    const started = [postgresStart, temporalPostgresStart].flatMap((r) => (r.status === 'fulfilled' && r.value !== null ? [r.value] : []));
    await Promise.allSettled(started.map((service) => service.stop()));
    const errors = [postgresStart, temporalPostgresStart].flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    throw errors.length === 1 ? errors[0] : new AggregateError(errors, errors.map((e) => (e as Error).message).join('\n\n'));
  }
  const postgres = postgresStart.value;
  const temporalPostgres = temporalPostgresStart.value;
  const stopPostgres = async (): Promise<void> => {
    const results = await Promise.allSettled([postgres.stop(), temporalPostgres?.stop()]);
    const errors = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    if (errors.length > 0) throw errors.length === 1 ? errors[0] : new AggregateError(errors, 'Failed to stop the PostgreSQL servers cleanly');
  };
  const adminUrl = (temporalPostgres ?? postgres).value.adminDatabaseUrl;
  if (adminUrl === null) {
    await stopPostgres();
    throw new Error('the embedded PostgreSQL gave no superuser URL for Temporal\'s databases');
  }
  const startedAtMs = Date.now();
  const logFilePath = join(logsDir, 'temporal-cluster.log');
  let cluster: TemporalCluster;
  let temporal: Pick<Supervisor<TemporalCluster>, 'gaveUp' | 'stop'>;
  try {
    // Its own role, as a deployment's: the superuser only creates the databases and the role.
    const passwordFilePath = (temporalPostgres ?? postgres).value.passwordFilePath!;
    const { [temporalServerRole]: password } = await ensurePasswords(passwordFilePath, new URL(adminUrl).hostname, [temporalServerRole]);
    const options: TemporalClusterOptions = {
      workDir: join(dataDir, 'temporal-cluster'),
      postgresUrl: adminUrl,
      serverRole: { name: temporalServerRole, password: password! },
      searchAttributes: needs.searchAttributes,
      logFilePath,
    };
    // A restart keeps the first start's frontend port: the workers and APIs point there. The first
    // start takes the one of the data dir's last start when it is free (remembered-ports.ts).
    let frontendPort: number | undefined;
    const startReniced = async (clusterOptions: TemporalClusterOptions): Promise<TemporalCluster> => {
      const server = await startTemporalCluster(clusterOptions);
      reniceServer('temporal', server.pid, niceness, log);
      return server;
    };
    const firstStart = (): Promise<TemporalCluster> =>
      startOnRememberedPort({
        dataDir,
        name: 'temporal-cluster-frontend',
        start: (port) => startReniced({ ...options, ...(port === undefined ? {} : { frontendPort: port }) }),
        portOf: (server) => Number(server.address.split(':').at(-1)),
        log,
        usable: (port) => port <= smallintPortCeiling,
      });
    const supervisor = new Supervisor<TemporalCluster>({
      name: 'temporal',
      start: () => (frontendPort === undefined ? firstStart() : startReniced({ ...options, frontendPort })),
      log,
      onReady: (server) => {
        frontendPort ??= Number(server.address.split(':').at(-1));
      },
    });
    cluster = supervise ? await supervisor.start() : await firstStart();
    temporal = supervise ? supervisor : { gaveUp: never, stop: () => cluster.stop() };
  } catch (error) {
    await stopPostgres().catch((stopError: unknown) => log(`postgres: stopping after the failed Temporal start failed: ${(stopError as Error).message}`));
    throw error;
  }
  const { schemaMs, serverMs, namespaceMs } = cluster.startTimings;
  log(
    `temporal: cluster server ready at ${cluster.address} (${Date.now() - startedAtMs} ms: schema ${schemaMs} ms, ` +
      `server ${serverMs} ms, namespace ${namespaceMs} ms; log ${logFilePath})`,
  );
  let stopping: Promise<void> | null = null;
  return {
    temporalAddress: cluster.address,
    temporalUiUrl: null,
    temporalKind: 'cluster',
    supervisionGaveUp: Promise.race([temporal.gaveUp, postgres.gaveUp, temporalPostgres?.gaveUp ?? never]),
    payloadKeysFilePath: payloadKeys,
    ...postgres.value,
    stop: () => {
      stopping ??= (async () => {
        const errors: unknown[] = [];
        const stopStartedAtMs = Date.now();
        await temporal.stop().then(
          () => log(`temporal: cluster server stopped (${Date.now() - stopStartedAtMs} ms)`),
          (error: unknown) => errors.push(error),
        );
        await stopPostgres().catch((error: unknown) => errors.push(error));
        if (errors.length > 0) throw new AggregateError(errors, 'Failed to stop the local stack cleanly');
        log('local stack stopped');
      })();
      return stopping;
    },
  };
}

async function payloadKeyFileFor(dataDir: string, needs: StackNeeds, log: (line: string) => void): Promise<string> {
  const { path, created } = await needs.ensurePayloadKeyFile(dataDir);
  log(`payload keys: ${created ? 'generated' : 'using'} ${path}`);
  return path;
}

/** The PostgreSQL role the cluster's Temporal server connects as; its password is in the embedded server's password file. */
const temporalServerRole = 'temporal';

/** Temporal's own PostgreSQL in the cluster shape: its data dir under the stack's, and its log's name. */
const temporalPostgresName = 'temporal-postgres' as const;

/** CHARGEGUARD_TEMPORAL: `dev` (the default) or `cluster`; anything else is refused, not guessed. */
export function temporalKindFromEnv(env: NodeJS.ProcessEnv = process.env): TemporalKind {
  const value = env.CHARGEGUARD_TEMPORAL?.trim() ?? '';
  if (value === '' || value === 'dev') return 'dev';
  if (value === 'cluster') return 'cluster';
  throw new Error(`CHARGEGUARD_TEMPORAL=${value} is not one of dev, cluster`);
}

type PostgresUrls = Pick<LocalStack, 'databaseUrl' | 'migrationDatabaseUrl' | 'adminDatabaseUrl' | 'passwordFilePath'>;

/**
 * An embedded PostgreSQL under `dataDir/<name>` (the ledger's is `postgres`), or DATABASE_URL's when
 * set and `external` allows it (Temporal's own server in the cluster shape is always embedded).
 */
async function startPostgres(
  dataDir: string,
  logsDir: string,
  needs: StackNeeds,
  log: (line: string) => void,
  niceness: number,
  supervise = false,
  which: { name: 'postgres' | 'temporal-postgres'; external: boolean } = { name: 'postgres', external: true },
): Promise<Service<PostgresUrls> & { gaveUp: Promise<never> }> {
  const external = which.external ? nonEmptyEnv('DATABASE_URL') : null;
  if (external !== null) {
    const migration = nonEmptyEnv('MIGRATION_DATABASE_URL');
    log(`postgres: using DATABASE_URL=${maskUrlPassword(external, 'DATABASE_URL')}` + (migration ? `, migrating with MIGRATION_DATABASE_URL=${maskUrlPassword(migration, 'MIGRATION_DATABASE_URL')}` : ''));
    return {
      value: { databaseUrl: external, migrationDatabaseUrl: migration ?? external, adminDatabaseUrl: null, passwordFilePath: null },
      stop: async () => undefined,
      gaveUp: never,
    };
  }
  const startedAtMs = Date.now();
  const logFilePath = join(logsDir, `${which.name}.log`);
  // The stack's data dir is chargeguard's own: run as root, PostgreSQL's OS user is let through it
  // (a data dir made by `mktemp -d` is 0700), and the log says so.
  const options = { dataDir: join(dataDir, which.name), roles: needs.databaseRoles, logFilePath, grantTraverseOn: dataDir, log: (line: string) => log(`${which.name}: ${line}`) };
  const startOn = async (port: number | undefined): Promise<EmbeddedPostgres> => {
    const server = await startEmbeddedPostgres({ ...options, ...(port === undefined ? {} : { port }) });
    // Backends forked from now on take the postmaster's niceness.
    reniceServer(which.name, server.pid, niceness, log);
    return server;
  };
  // The port of this data dir's last start when it is free (remembered-ports.ts): DATABASE_URL as
  // printed then still holds.
  const firstStart = (): Promise<EmbeddedPostgres> =>
    startOnRememberedPort({
      dataDir,
      name: which.name,
      start: startOn,
      portOf: (server) => Number(new URL(server.databaseUrl).port),
      log,
      reclaimOrphan: () => reclaimOrphanedPostgres(options.dataDir, (line) => log(`${which.name}: ${line}`)),
    });
  // A restart keeps the first start's port (the URLs everyone holds); a crashed incarnation is
  // stopped first, which releases its lock (it names this process, which is alive).
  let port: number | undefined;
  let previous: EmbeddedPostgres | null = null;
  const supervisor = new Supervisor<EmbeddedPostgres>({
    name: which.name,
    start: async () => {
      await previous?.stop();
      previous = port === undefined ? await firstStart() : await startOn(port);
      return previous;
    },
    log,
    onReady: (server) => {
      port ??= Number(new URL(server.databaseUrl).port);
    },
  });
  const server = supervise ? await supervisor.start() : await firstStart();
  log(`${which.name}: embedded server ready at ${maskUrlPassword(which.external ? server.appDatabaseUrl : server.databaseUrl)} (${Date.now() - startedAtMs} ms, log ${logFilePath})`);
  return {
    value: {
      databaseUrl: server.appDatabaseUrl,
      migrationDatabaseUrl: server.ownerDatabaseUrl,
      adminDatabaseUrl: server.databaseUrl,
      passwordFilePath: server.passwordFilePath,
    },
    stop: async () => {
      const stopStartedAtMs = Date.now();
      if (supervise) await supervisor.stop();
      // The incarnation running now, or the last one, whose lock a crash left behind.
      await (previous ?? server).stop();
      log(`${which.name}: embedded server stopped (${Date.now() - stopStartedAtMs} ms)`);
    },
    gaveUp: supervise ? supervisor.gaveUp : never,
  };
}

/** What a part nobody supervises gives up: nothing, ever. */
const never = new Promise<never>(() => undefined);

function nonEmptyEnv(name: string): string | null {
  const value = process.env[name];
  return value === undefined || value.trim() === '' ? null : value.trim();
}

