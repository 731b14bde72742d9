import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import pg from 'pg';
import { findFreePorts } from '../../src/support/free-port.js';
import { resolveTemporalServerInstall } from '../../src/stack/temporal-cluster.js';
import type { RunningTemporal } from './bench-stack.js';
import { startChargeguardCluster } from '../../src/runtime/local-stack.js';

export interface BenchClusterOptions {
  workDir: string;
  /** A role that may create databases: the run's embedded superuser, or DATABASE_URL's. */
  postgresUrl: string;
  databaseName: string;
  visibilityDatabaseName: string;
  /** Drop the two databases after the server stops (a DATABASE_URL server outlives the run). */
  dropDatabasesOnStop: boolean;
  logFilePath: string;
}

/**
 * The real Temporal server on the run's PostgreSQL, as `chargeguard start --cluster` runs it
 * (src/stack/temporal-cluster.ts), in databases of its own beside the ledger's: the ledger and
 * Temporal's persistence then share one PostgreSQL, its CPU and its disk, as they do in that stack.
 */
export async function startBenchCluster(options: BenchClusterOptions): Promise<RunningTemporal> {
  const [metricsPort] = await findFreePorts(1, '127.0.0.1');
  const cluster = await startChargeguardCluster({
    workDir: options.workDir,
    metricsPort: metricsPort!,
    postgresUrl: options.postgresUrl,
    databaseName: options.databaseName,
    visibilityDatabaseName: options.visibilityDatabaseName,
    logFilePath: options.logFilePath,
  });
  const { schemaMs, serverMs, namespaceMs } = cluster.startTimings;
  const version = await serverVersion();
  return {
    address: cluster.address,
    metricsUrl: cluster.metricsUrl,
    pid: cluster.pid,
    description:
      `Temporal server ${version} (cluster stack) on PostgreSQL databases ${options.databaseName} + ${options.visibilityDatabaseName}, ` +
      `started in ${((schemaMs + serverMs + namespaceMs) / 1000).toFixed(1)} s (schema ${(schemaMs / 1000).toFixed(1)} s)`,
    stop: async () => {
      await cluster.stop();
      if (options.dropDatabasesOnStop) await dropDatabases(options.postgresUrl, [options.databaseName, options.visibilityDatabaseName]);
    },
  };
}

/** `temporal-server --version` prints "temporal-server version 1.29.1": the version is the last word. */
async function serverVersion(): Promise<string> {
  const { serverBin } = resolveTemporalServerInstall();
  return promisify(execFile)(serverBin, ['--version'], { timeout: 10_000 }).then(
    ({ stdout }) => stdout.trim().split(/\s+/).pop() ?? 'version unknown',
    () => 'version unknown',
  );
}

async function dropDatabases(postgresUrl: string, names: readonly string[]): Promise<void> {
  const url = new URL(postgresUrl);
  url.pathname = '/postgres';
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    for (const name of names) await client.query(`DROP DATABASE IF EXISTS ${client.escapeIdentifier(name)} WITH (FORCE)`);
  } finally {
    await client.end();
  }
}
