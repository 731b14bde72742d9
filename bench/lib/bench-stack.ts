import { mkdir, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { startEmbeddedPostgres } from '../../src/stack/embedded-postgres.js';
import { readFileIfPresent } from '../../src/support/files.js';
import { startBenchTemporal, type BenchTemporal } from './bench-temporal.js';

export interface BenchStack {
  databaseUrl: string;
  temporalAddress: string;
  /** null when TEMPORAL_ADDRESS names a server the bench did not start (no metrics, no pragmas). */
  temporalMetricsUrl: string | null;
  /** The SQLite pragmas the current Temporal server runs with; null for an external server. */
  sqlitePragmas: readonly string[] | null;
  /** Process ids of the servers the bench started, for CPU accounting. */
  serverPids: { temporal: number | null; postgres: number | null };
  /** Replaces the Temporal server by a fresh one with these pragmas (embedded only). */
  restartTemporal(sqlitePragmas: readonly string[]): Promise<void>;
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
  keepData: boolean;
  log: (line: string) => void;
}): Promise<BenchStack> {
  const dataDir = resolve(options.dataDir);
  await mkdir(dataDir, { recursive: true, mode: 0o711 });
  const logsDir = join(dataDir, 'logs');
  const externalTemporal = nonEmpty(process.env.TEMPORAL_ADDRESS);
  const externalDatabase = nonEmpty(process.env.DATABASE_URL);

  const postgres = externalDatabase === null
    ? await startEmbeddedPostgres({ dataDir: join(dataDir, 'postgres'), logFilePath: join(logsDir, 'postgres.log') })
    : null;
  const databaseUrl = externalDatabase ?? postgres!.databaseUrl;
  options.log(externalDatabase === null ? 'postgres: embedded, fresh cluster' : 'postgres: DATABASE_URL');
  await migrateLedger(databaseUrl);

  let temporal: BenchTemporal | null = null;
  let generation = 0;
  const startTemporal = async (pragmas: readonly string[]): Promise<BenchTemporal> =>
    startBenchTemporal({
      dbFilePath: join(dataDir, `temporal-${++generation}.sqlite`),
      sqlitePragmas: pragmas,
      logFilePath: join(logsDir, 'temporal.log'),
    });
  try {
    if (externalTemporal === null) temporal = await startTemporal(options.sqlitePragmas);
  } catch (error) {
    await postgres?.stop();
    throw error;
  }
  options.log(externalTemporal === null ? `temporal: dev server, pragmas [${options.sqlitePragmas.join(', ')}]` : 'temporal: TEMPORAL_ADDRESS');

  const stack: BenchStack = {
    databaseUrl,
    temporalAddress: externalTemporal ?? temporal!.address,
    temporalMetricsUrl: temporal?.metricsUrl ?? null,
    sqlitePragmas: externalTemporal === null ? options.sqlitePragmas : null,
    serverPids: { temporal: temporal?.pid ?? null, postgres: await postmasterPid(databaseUrl, postgres !== null) },
    restartTemporal: async (pragmas) => {
      if (temporal === null) throw new Error('TEMPORAL_ADDRESS is set: the bench cannot restart that server');
      await temporal.stop();
      temporal = await startTemporal(pragmas);
      stack.temporalAddress = temporal.address;
      stack.temporalMetricsUrl = temporal.metricsUrl;
      stack.sqlitePragmas = pragmas;
      stack.serverPids.temporal = temporal.pid;
    },
    stop: async () => {
      await Promise.allSettled([temporal?.stop(), postgres?.stop()]);
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
