import { ensurePayloadKeyFile } from '../../src/codec/payload-key-file.js';
import { mkdir, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { readFileIfPresent } from '../../src/support/files.js';
import { startBenchTemporal } from './bench-temporal.js';
import { startBenchCluster } from './bench-cluster.js';
import { startLedgerPostgresWith } from './postgres-with-settings.js';

/**
 * Which Temporal server the Temporal-facing scenarios run against: `dev` is the CLI's dev server
 * on a SQLite file (what `chargeguard start` runs), `cluster` the real server persisted to the
 * run's PostgreSQL (what `chargeguard start --cluster` runs).
 */
export type TemporalKind = 'dev' | 'cluster';
export const temporalKinds: readonly TemporalKind[] = ['dev', 'cluster'];

/** What the bench needs of a Temporal server it started, whichever kind. */
export interface RunningTemporal {
  address: string;
  /** Prometheus endpoint; null when the server has none (the cluster stack runs without). */
  metricsUrl: string | null;
  /** The server's pid for CPU accounting; null when it cannot be known. */
  pid: number | null;
  /** How the server was started, for the report (e.g. `dev server, pragmas [...]`). */
  description: string;
  stop(): Promise<void>;
}

export interface BenchStack {
  databaseUrl: string;
  temporalAddress: string;
  /** null when TEMPORAL_ADDRESS names a server the bench did not start (no metrics, no pragmas). */
  temporalMetricsUrl: string | null;
  /** The SQLite pragmas the current Temporal server runs with; null for an external server or the cluster. */
  sqlitePragmas: readonly string[] | null;
  /** The kind of the current Temporal server (an external one counts as `dev`: the bench cannot tell). */
  temporalKind: TemporalKind;
  /** Whether TEMPORAL_ADDRESS names the server: then the bench can neither restart nor switch it. */
  temporalExternal: boolean;
  /** How the current Temporal server was started, for the report. */
  temporalDescription: string;
  /** Process ids of the servers the bench started, for CPU accounting. */
  serverPids: { temporal: number | null; postgres: number | null };
  /** Replaces the Temporal server by a fresh dev server with these pragmas (embedded only). */
  restartTemporal(sqlitePragmas: readonly string[]): Promise<void>;
  /**
   * Replaces the Temporal server by a fresh one of `kind` (a no-op when it already is that kind):
   * the new server starts empty, the ledger keeps what it holds.
   */
  switchTemporal(kind: TemporalKind): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The servers a bench run measures against: fresh ones under `dataDir` (a new Temporal SQLite file
 * and PostgreSQL cluster per run, so results do not depend on what an earlier run left behind), or
 * the ones TEMPORAL_ADDRESS / DATABASE_URL name.
 */
export async function startBenchStack(options: {
  dataDir: string;
  sqlitePragmas: readonly string[];
  /** The kind started first; `dev` by default. */
  temporalKind?: TemporalKind;
  keepData: boolean;
  log: (line: string) => void;
  /**
   * Server settings for the embedded PostgreSQL beyond its defaults (ALTER SYSTEM, then a restart,
   * as settings such as shared_preload_libraries need); refused with DATABASE_URL.
   */
  postgresSettings?: Readonly<Record<string, string>>;
}): Promise<BenchStack> {
  const dataDir = resolve(options.dataDir);
  await mkdir(dataDir, { recursive: true, mode: 0o711 });
  const logsDir = join(dataDir, 'logs');
  // Encrypted payloads, as every deployment runs: the run's key file, found through the environment
  // by the in-process worker, worker processes and the session's client alike.
  if (!['CHARGEGUARD_PAYLOAD_KEYS', 'CHARGEGUARD_PAYLOAD_KEYS_FILE', 'CHARGEGUARD_PAYLOAD_PLAINTEXT'].some((name) => nonEmpty(process.env[name]) !== null)) {
    process.env.CHARGEGUARD_PAYLOAD_KEYS_FILE = (await ensurePayloadKeyFile(dataDir)).path;
  }
  const externalTemporal = nonEmpty(process.env.TEMPORAL_ADDRESS);
  const externalDatabase = nonEmpty(process.env.DATABASE_URL);

  if (externalDatabase !== null && Object.keys(options.postgresSettings ?? {}).length > 0) throw new Error('postgresSettings apply to the embedded PostgreSQL only; unset DATABASE_URL');
  const postgres = externalDatabase === null
    ? await startLedgerPostgresWith({ dataDir: join(dataDir, 'postgres'), logFilePath: join(logsDir, 'postgres.log') }, options.postgresSettings ?? {})
    : null;
  const databaseUrl = externalDatabase ?? postgres!.databaseUrl;
  options.log(externalDatabase === null ? 'postgres: embedded, fresh cluster' : 'postgres: DATABASE_URL');
  await migrateLedger(databaseUrl);

  let temporal: RunningTemporal | null = null;
  let generation = 0;
  const startTemporal = async (kind: TemporalKind, pragmas: readonly string[]): Promise<RunningTemporal> => {
    generation++;
    if (kind === 'cluster') {
      return startBenchCluster({
        workDir: join(dataDir, `temporal-cluster-${generation}`),
        postgresUrl: databaseUrl,
        // Names of this start alone: on an external DATABASE_URL an earlier run's databases may remain.
        databaseName: `bench_temporal_${generation}`,
        visibilityDatabaseName: `bench_temporal_visibility_${generation}`,
        dropDatabasesOnStop: externalDatabase !== null && !options.keepData,
        logFilePath: join(logsDir, 'temporal-cluster.log'),
      });
    }
    const dev = await startBenchTemporal({
      dbFilePath: join(dataDir, `temporal-${generation}.sqlite`),
      sqlitePragmas: pragmas,
      logFilePath: join(logsDir, 'temporal.log'),
    });
    return { ...dev, description: `dev server, pragmas [${pragmas.join(', ')}]` };
  };
  const firstKind = options.temporalKind ?? 'dev';
  try {
    if (externalTemporal === null) temporal = await startTemporal(firstKind, options.sqlitePragmas);
  } catch (error) {
    await postgres?.stop();
    throw error;
  }
  options.log(externalTemporal === null ? `temporal: ${temporal!.description}` : 'temporal: TEMPORAL_ADDRESS');

  const replace = async (kind: TemporalKind, pragmas: readonly string[]): Promise<void> => {
    if (temporal === null) throw new Error('TEMPORAL_ADDRESS is set: the bench cannot restart or replace that server');
    await temporal.stop();
    temporal = null;
    temporal = await startTemporal(kind, pragmas);
    stack.temporalAddress = temporal.address;
    stack.temporalMetricsUrl = temporal.metricsUrl;
    stack.sqlitePragmas = kind === 'dev' ? pragmas : null;
    stack.temporalKind = kind;
    stack.temporalDescription = temporal.description;
    stack.serverPids.temporal = temporal.pid;
    options.log(`temporal: ${temporal.description}`);
  };
  const stack: BenchStack = {
    databaseUrl,
    temporalAddress: externalTemporal ?? temporal!.address,
    temporalMetricsUrl: temporal?.metricsUrl ?? null,
    sqlitePragmas: externalTemporal === null && firstKind === 'dev' ? options.sqlitePragmas : null,
    temporalKind: externalTemporal === null ? firstKind : 'dev',
    temporalExternal: externalTemporal !== null,
    temporalDescription: temporal?.description ?? `TEMPORAL_ADDRESS ${externalTemporal}`,
    serverPids: { temporal: temporal?.pid ?? null, postgres: await postmasterPid(databaseUrl, postgres !== null) },
    restartTemporal: async (pragmas) => {
      if (stack.temporalKind !== 'dev') throw new Error('only the dev server takes SQLite pragmas');
      await replace('dev', pragmas);
    },
    switchTemporal: async (kind) => {
      if (kind === stack.temporalKind) return;
      await replace(kind, options.sqlitePragmas);
    },
    stop: async () => {
      // Temporal first: the cluster persists to this PostgreSQL and would log errors as it went away.
      await Promise.allSettled([temporal?.stop()]);
      await Promise.allSettled([postgres?.stop()]);
      if (!options.keepData) await rm(dataDir, { recursive: true, force: true });
    },
  };
  return stack;
}

/** The postmaster's pid (the parent of the backend we ask), for CPU accounting of an embedded server. */
async function postmasterPid(databaseUrl: string, embedded: boolean): Promise<number | null> {
  if (!embedded) return null;
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const stat = await readFileIfPresent(`/proc/${rows[0]!.pid}/stat`);
    const parent = stat === null ? NaN : Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    return Number.isInteger(parent) ? parent : null;
  } finally {
    await client.end();
  }
}

function nonEmpty(value: string | undefined): string | null {
  return value === undefined || value.trim() === '' ? null : value.trim();
}
