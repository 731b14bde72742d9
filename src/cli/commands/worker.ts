import type { Command } from 'commander';
import { NativeConnection } from '@temporalio/worker';
import { loadConfig } from '../../config.js';
import { migrateLedger } from '../../ledger/migrate.js';
import { createLedgerPool } from '../../ledger/pool.js';
import { createChargeWorker } from '../../worker/charge-worker.js';
import { waitForShutdownSignal } from '../shutdown.js';

export function registerWorkerCommand(program: Command): void {
  program
    .command('worker')
    .description('run a worker against TEMPORAL_ADDRESS and DATABASE_URL (stateless: run as many as you like)')
    .action(async () => {
      const config = loadConfig();
      if (!config.TEMPORAL_ADDRESS || !config.DATABASE_URL) {
        throw new Error('worker needs TEMPORAL_ADDRESS and DATABASE_URL; for everything on one machine use `start`');
      }
      await migrateLedger(config.DATABASE_URL);
      const ledger = createLedgerPool({ databaseUrl: config.DATABASE_URL, maxConnections: config.LEDGER_POOL_MAX_CONNECTIONS });
      const connection = await NativeConnection.connect({ address: config.TEMPORAL_ADDRESS });
      const worker = await createChargeWorker({ connection, namespace: config.TEMPORAL_NAMESPACE, ledger });
      process.stderr.write(`worker polling task queue "charges" on ${config.TEMPORAL_ADDRESS}\n`);
      const running = worker.run();
      await Promise.race([waitForShutdownSignal(), running]);
      // Temporal's Runtime stops its workers on SIGINT/SIGTERM by itself; shutting down a worker
      // that is already draining throws, which skipped the cleanup below and exited with 1.
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running;
      await connection.close();
      await ledger.end();
    });
}
