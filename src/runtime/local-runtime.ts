import { resolve } from 'node:path';
import { NativeConnection, type Worker } from '@temporalio/worker';
import { step } from '../support/progress.js';
import type { ChargeguardConfig } from '../config.js';
import type { LocalStack } from '../stack/stack.js';
import { createChargeWorker } from '../worker/charge-worker.js';
import { startConfiguredDeliverer } from './webhook-deliverer-threaded.js';
import { startEmbeddedProvider, type EmbeddedProvider } from './embedded-provider.js';
import { dependencyWaitLimitsFromConfig, isTemporalStartFailureTransient, openAppContext, type RuntimeContext } from './app-context.js';
import { waitForDependency, type DependencyWaitLimits } from '../support/dependency-wait.js';
import { payloadProtectionFromSettings } from '../codec/payload-protection.js';
import { nativeConnectionSecurity, plaintextTemporal, temporalConnectionSecurity, type TemporalConnectionSecurity } from './temporal-connection.js';
import { startChargeguardStack } from './local-stack.js';

export interface LocalRuntime {
  stack: LocalStack;
  /**
   * The configuration the runtime runs with: the one given, with CHARGEGUARD_PAYLOAD_KEYS_FILE
   * pointing at the embedded stack's generated key file when no keys were set.
   */
  config: ChargeguardConfig;
  context: RuntimeContext;
  worker: Worker;
  /** Resolves when the worker stops; rejects if it crashes. */
  workerRun: Promise<void>;
  /** The payment provider provider charges go to: the default provider's double unless a provider is configured. */
  provider: EmbeddedProvider;
  /** Stops the worker, closes the connections and stops the embedded servers; every step runs even if one fails. */
  stop(): Promise<void>;
}

/** Bound on one attempt of the worker's connection to reach Temporal at start. */
const workerConnectAttemptMs = 3_000;

/**
 * The worker's (native) connection to Temporal, once Temporal answers for the namespace, waiting
 * with bounded backoff meanwhile and logging each wait.
 */
export async function connectWorkerWhenReachable(
  address: string,
  namespace: string,
  options: { limits: DependencyWaitLimits; log: (line: string) => void; security?: TemporalConnectionSecurity },
): Promise<NativeConnection> {
  return waitForDependency(
    { dependency: 'temporal', address, purpose: `connect the worker (namespace ${namespace})` },
    async () => {
      const connection = await NativeConnection.connect({ address, ...nativeConnectionSecurity(options.security ?? plaintextTemporal) });
      try {
        await connection.withDeadline(Date.now() + workerConnectAttemptMs, () => connection.workflowService.describeNamespace({ namespace }));
        return connection;
      } catch (error) {
        await connection.close().catch((closeError: unknown) => options.log(`closing the failed worker connection failed: ${(closeError as Error).message}`));
        throw error;
      }
    },
    { ...options, isTransient: isTemporalStartFailureTransient },
  );
}

/**
 * Runs every cleanup step in order even when one fails, then reports the failures together: a
 * worker that failed to stop must not leave the embedded PostgreSQL running.
 */
export async function runAll(steps: ReadonlyArray<readonly [string, () => Promise<unknown>]>, log: (line: string) => void): Promise<void> {
  const failures: unknown[] = [];
  for (const [label, run] of steps) {
    try {
      await run();
    } catch (error) {
      log(`cleanup: ${label} failed: ${(error as Error).message}`);
      failures.push(error);
    }
  }
  if (failures.length > 0) throw new AggregateError(failures, `${failures.length} cleanup step(s) failed`);
}

/**
 * The embedded stack's generated key file, unless the configuration names keys of its own: every
 * process of the deployment then reads the same file (`start` prints it for other terminals).
 */
export function withStackPayloadKeys(config: ChargeguardConfig, stack: Pick<LocalStack, 'payloadKeysFilePath'>): ChargeguardConfig {
  if (stack.payloadKeysFilePath === null || config.CHARGEGUARD_PAYLOAD_KEYS !== undefined || config.CHARGEGUARD_PAYLOAD_KEYS_FILE !== undefined) return config;
  return { ...config, CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFilePath };
}

/**
 * The main job on one machine: the embedded servers (or TEMPORAL_ADDRESS / DATABASE_URL), the
 * migrated ledger, a worker, and the client every surface uses.
 */
export async function startLocalRuntime(
  config: ChargeguardConfig,
  options: { temporalUiPort?: number | null; temporalUiCodecEndpoint?: string; log?: (line: string) => void } = {},
): Promise<LocalRuntime> {
  const log = options.log ?? ((line: string) => process.stderr.write(`  ${line}\n`));
  // Before anything starts: a certificate file that cannot be read stops the start here, and so do
  // missing payload keys for an external Temporal (the embedded one's are generated with the stack).
  const temporalSecurity = temporalConnectionSecurity(config);
  if (config.TEMPORAL_ADDRESS !== undefined) payloadProtectionFromSettings(config);
  const stack = await step('starting Temporal and PostgreSQL', () =>
    startChargeguardStack({
      dataDir: resolve(config.CHARGEGUARD_DATA_DIR),
      temporalUiPort: options.temporalUiPort,
      serverNiceness: config.CHARGEGUARD_EMBEDDED_SERVER_NICENESS,
      ...(options.temporalUiCodecEndpoint === undefined ? {} : { temporalUiCodecEndpoint: options.temporalUiCodecEndpoint }),
      log,
    }),
  );
  // Whatever was opened so far, closed in reverse if a later step fails.
  const undo: Array<readonly [string, () => Promise<unknown>]> = [['stop Temporal and PostgreSQL', () => stack.stop()]];
  // runAll has logged each failed step; the start's own error is the one thrown.
  const rollback = () => runAll([...undo].reverse(), log).catch((error: unknown) => log(`rollback after a failed start: ${(error as Error).message}`));
  try {
    config = withStackPayloadKeys(config, stack);
    const payloadProtection = payloadProtectionFromSettings(config);
    const wait = { limits: dependencyWaitLimitsFromConfig(config), log };
    const endpoints = { temporalAddress: stack.temporalAddress, databaseUrl: stack.databaseUrl, migrationDatabaseUrl: stack.migrationDatabaseUrl };
    const connection = await connectWorkerWhenReachable(stack.temporalAddress, config.TEMPORAL_NAMESPACE, { ...wait, security: temporalSecurity });
    undo.push(['close the worker connection', () => connection.close()]);
    const context = await step('migrating the ledger', () =>
      openAppContext(config, endpoints, { workerConnection: connection, log, waitLimits: wait.limits }),
    );
    undo.push(['close the ledger pool', () => context.close()]);
    const provider = await step('starting the payment provider', () => startEmbeddedProvider());
    undo.push(['stop the payment provider', () => provider.stop()]);
    const worker = await step('bundling workflows and starting the worker', () =>
      createChargeWorker({ connection, namespace: config.TEMPORAL_NAMESPACE, ledger: context.ledger, payloadProtection, providers: provider.connectors }),
    );
    const workerRun = worker.run();
    // Observed here so a crash is never an unhandled rejection and is logged when it happens;
    // callers still see it through workerRun, and stop() waits on this without reporting it twice.
    const workerEnded = workerRun.catch((error: unknown) => log(`the worker stopped with an error: ${(error as Error).message}`));
    const deliverer = await startConfiguredDeliverer(config, stack.databaseUrl, { log });
    if (deliverer) undo.push(['stop the webhook deliverer', () => deliverer.stop()]);
    return {
      stack,
      config,
      context,
      worker,
      workerRun,
      provider,
      stop: () =>
        runAll(
          [
            [
              'stop the worker',
              async () => {
                // The SDK's own signal handling may already be draining the worker on Ctrl-C.
                if (worker.getState() === 'RUNNING') worker.shutdown();
                await workerEnded;
              },
            ],
            ['stop the webhook deliverer', async () => deliverer?.stop()],
            ['stop the payment provider', () => provider.stop()],
            ['close the ledger pool', () => context.close()],
            ['close the worker connection', () => connection.close()],
            ['stop Temporal and PostgreSQL', () => stack.stop()],
          ],
          log,
        ),
    };
  } catch (error) {
    await rollback();
    throw error;
  }
}
