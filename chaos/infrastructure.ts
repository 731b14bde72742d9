import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { EmbeddedPostgres } from '../src/stack/embedded-postgres.js';
import { findFreePorts } from '../src/support/free-port.js';
import { findFreePortsBelow, smallintPortCeiling, type TemporalCluster } from '../src/stack/temporal-cluster.js';
import type { TemporalDevServer } from '../src/stack/temporal-dev-server.js';
import { pollUntil } from '../src/support/wait.js';
import { isProcessAlive } from '../src/support/child-process.js';
import { startChargeguardCluster, startChargeguardDevServer, startLedgerPostgres } from '../src/runtime/local-stack.js';

/** How PostgreSQL goes down: `fast` is a clean shutdown (SIGINT), `immediate` a crash (SIGQUIT: no checkpoint, WAL replay on start). */
export type PostgresStopMode = 'fast' | 'immediate';

/** PostgreSQL the chaos run owns, on a fixed port so every process reconnects to the same address after a restart. */
export interface ChaosPostgres {
  databaseUrl: string;
  restart(mode: PostgresStopMode): Promise<void>;
  stop(): Promise<void>;
}

/** Temporal the chaos run owns: stopped and started again on the same address and persistence. */
export interface ChaosTemporal {
  address: string;
  /** What is running: the dev server (SQLite) or the Temporal server on PostgreSQL. */
  kind: string;
  restart(): Promise<void>;
  stop(): Promise<void>;
}

const postmasterExitTimeoutMs = 30_000;

/**
 * `downForMs`: how long each restart keeps the server down after it stopped (0: started again at
 * once, as a supervisor would). A longer outage is a fault of its own shape, e.g. a failover.
 */
export async function startChaosPostgres(dataDir: string, downForMs = 0, name = 'postgres'): Promise<ChaosPostgres> {
  const [port] = await findFreePorts(1);
  const options = { dataDir: join(dataDir, name), port: port!, logFilePath: join(dataDir, 'logs', `${name}.log`) };
  let server: EmbeddedPostgres = await startLedgerPostgres(options);
  const databaseUrl = server.databaseUrl;
  return {
    databaseUrl,
    restart: async (mode) => {
      if (mode === 'immediate') await crashPostmaster(options.dataDir);
      // After a crash stop() only releases the handle and the lock: the process is already gone.
      await server.stop();
      // The outage itself, not a wait for something: nothing is listening on the port meanwhile.
      if (downForMs > 0) await new Promise((resolve) => setTimeout(resolve, downForMs));
      server = await startLedgerPostgres(options);
    },
    stop: () => server.stop(),
  };
}

/** SIGQUIT to the postmaster: PostgreSQL's "immediate" shutdown, which recovers from WAL on the next start. */
async function crashPostmaster(pgDataDir: string): Promise<void> {
  const pid = Number.parseInt((await readFile(join(pgDataDir, 'postmaster.pid'), 'utf8')).split('\n')[0] ?? '', 10);
  if (!Number.isInteger(pid) || pid <= 0) throw new Error(`no postmaster pid in ${pgDataDir}/postmaster.pid`);
  process.kill(pid, 'SIGQUIT');
  const exited = await pollUntil(async () => !isProcessAlive(pid), { deadlineMs: Date.now() + postmasterExitTimeoutMs, intervalMs: 50 });
  if (!exited.ok) throw new Error(`postmaster ${pid} still runs ${postmasterExitTimeoutMs} ms after SIGQUIT`);
}


/** Starts the Temporal a chaos run restarts, beside the run's PostgreSQL (which the cluster persists to). */
export type ChaosTemporalStarter = (dataDir: string, postgres: ChaosPostgres, settings?: { keepStaleMembership?: boolean }) => Promise<ChaosTemporal>;

/** The Temporal CLI's dev server, persisted to SQLite, restarted on the same port and file. */
export const startChaosDevServer: ChaosTemporalStarter = async (dataDir) => {
  const [port] = await findFreePorts(1);
  const options = {
    dbFilePath: join(dataDir, 'temporal.sqlite'),
    port: port!,
    uiPort: null,
    logFilePath: join(dataDir, 'logs', 'temporal.log'),
  };
  let server: TemporalDevServer = await startChargeguardDevServer(options);
  return {
    address: server.address,
    kind: 'dev server (SQLite)',
    restart: async () => {
      await server.stop();
      server = await startChargeguardDevServer(options);
    },
    stop: () => server.stop(),
  };
};

/**
 * The Temporal server itself on the run's PostgreSQL (the cluster stack), restarted on the same
 * frontend port and databases: so a PostgreSQL restart takes Temporal's persistence down too, as
 * it would in production.
 */
export const startChaosCluster: ChaosTemporalStarter = async (dataDir, postgres, settings) => {
  const [frontendPort] = await findFreePortsBelow(1, smallintPortCeiling);
  const options = {
    workDir: join(dataDir, 'temporal-cluster'),
    postgresUrl: postgres.databaseUrl,
    logFilePath: join(dataDir, 'logs', 'temporal.log'),
    frontendPort: frontendPort!,
    keepStaleMembership: settings?.keepStaleMembership === true,
  };
  let server: TemporalCluster = await startChargeguardCluster(options);
  return {
    address: server.address,
    kind: 'Temporal server on PostgreSQL (cluster stack)',
    restart: async () => {
      await server.stop();
      server = await startChargeguardCluster(options);
    },
    stop: () => server.stop(),
  };
};
