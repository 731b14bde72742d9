import { resolve } from 'node:path';
import { NativeConnection, type Worker } from '@temporalio/worker';
import { step } from '../cli/progress.js';
import type { ChargeguardConfig } from '../config.js';
import { startLocalStack, type LocalStack } from '../stack/stack.js';
import { createChargeWorker } from '../worker/charge-worker.js';
import { openAppContext, type AppContext } from './app-context.js';

export interface LocalRuntime {
  stack: LocalStack;
  context: AppContext;
  worker: Worker;
  /** Resolves when the worker stops; rejects if it crashes. */
  workerRun: Promise<void>;
  stop(): Promise<void>;
}

/**
 * The main job on one machine: the embedded servers (or TEMPORAL_ADDRESS / DATABASE_URL), the
 * migrated ledger, a worker, and the client every surface uses.
 */
export async function startLocalRuntime(
  config: ChargeguardConfig,
  options: { temporalUiPort?: number | null } = {},
): Promise<LocalRuntime> {
  const stack = await step('starting Temporal and PostgreSQL', () =>
    startLocalStack({
      dataDir: resolve(config.CHARGEGUARD_DATA_DIR),
      temporalUiPort: options.temporalUiPort,
      log: (line) => process.stderr.write(`  ${line}\n`),
    }),
  );
  try {
    const endpoints = { temporalAddress: stack.temporalAddress, databaseUrl: stack.databaseUrl };
    const connection = await NativeConnection.connect({ address: stack.temporalAddress });
    const context = await step('migrating the ledger', () => openAppContext(config, endpoints, { workerConnection: connection }));
    const worker = await step('bundling workflows and starting the worker', () =>
      createChargeWorker({ connection, namespace: config.TEMPORAL_NAMESPACE, ledger: context.ledger }),
    );
    const workerRun = worker.run();
    return {
      stack,
      context,
      worker,
      workerRun,
      stop: async () => {
        // The SDK's own signal handling may already be draining the worker on Ctrl-C.
        if (worker.getState() === 'RUNNING') worker.shutdown();
        await workerRun.catch(() => {});
        await context.close();
        await connection.close();
        await stack.stop();
      },
    };
  } catch (error) {
    await stack.stop().catch(() => {});
    throw error;
  }
}
