import { Option, type Command } from 'commander';
import { loadConfig } from '../../config.js';
import {
  dependencyWaitLimitsFromConfig,
  migrateLedgerWhenReachable,
  openLedgerPoolWhenReachable,
  stepBatchLimitsFromConfig,
} from '../../runtime/app-context.js';
import { connectWorkerWhenReachable } from '../../runtime/local-runtime.js';
import { configuredProviderConnectors } from '../../providers/configured.js';
import { installProcessSafetyNet } from '../../runtime/process-safety.js';
import { applyWorkerNiceness } from '../../runtime/process-niceness.js';
import { temporalConnectionSecurity } from '../../runtime/temporal-connection.js';
import { createChargeWorker } from '../../worker/charge-worker.js';
import { assertPayloadKeysMatchWorkers } from '../../codec/key-advertisement.js';
import { describePayloadProtection, payloadProtectionFromSettings } from '../../codec/payload-protection.js';
import { chargeTaskQueue } from '../../../workflows/definitions.js';
import { waitForStopReason } from '../shutdown.js';
import { checkedWorkflowBundle } from './worker-bundle.js';
import { startConfiguredDeliverer } from '../../runtime/webhook-deliverer-threaded.js';

export function registerWorkerCommand(program: Command): void {
  program
    .command('worker')
    .description('run a worker against TEMPORAL_ADDRESS and DATABASE_URL (stateless: run as many as you like)')
    .addOption(
      new Option('--bundle <path>', 'the workflow bundle `npm run build` made (dist/workflow-bundle.js); refused unless built from the workflow code this worker runs')
        .env('CHARGEGUARD_WORKFLOW_BUNDLE'),
    )
    .action(async (options: { bundle?: string }) => {
      const safety = installProcessSafetyNet({ command: 'worker' });
      const config = loadConfig();
      if (!config.TEMPORAL_ADDRESS || !config.DATABASE_URL) {
        throw new Error('worker needs TEMPORAL_ADDRESS and DATABASE_URL; for everything on one machine use `start`');
      }
      // First, before the Temporal runtime, the connection, the worker or the webhook deliverer start
      // any thread of their own: the threads they start inherit the niceness set here.
      applyWorkerNiceness(config.CHARGEGUARD_WORKER_NICENESS, (line) => process.stderr.write(`${line}\n`));
      // Checked before any server is waited for: a wrong bundle is a deployment mistake, not a delay.
      const workflowBundle = options.bundle === undefined ? undefined : await checkedWorkflowBundle(options.bundle);
      // Before anything is opened: a certificate file or a key file that cannot be read, or no payload
      // keys and no acceptance of plaintext, stops the start here.
      const temporalSecurity = temporalConnectionSecurity(config);
      const payloadProtection = payloadProtectionFromSettings(config);
      // Either server may still be starting (compose, a reboot): wait for it, within the limits.
      const wait = { limits: dependencyWaitLimitsFromConfig(config), log: (line: string) => process.stderr.write(`${line}\n`) };
      wait.log(describePayloadProtection(payloadProtection));
      await migrateLedgerWhenReachable(config.MIGRATION_DATABASE_URL ?? config.DATABASE_URL, wait);
      const ledger = await openLedgerPoolWhenReachable(config.DATABASE_URL, config.LEDGER_POOL_MAX_CONNECTIONS, wait, stepBatchLimitsFromConfig(config));
      let failure: unknown = undefined;
      try {
        const connection = await connectWorkerWhenReachable(config.TEMPORAL_ADDRESS, config.TEMPORAL_NAMESPACE, { ...wait, security: temporalSecurity });
        try {
          // A worker whose keys differ from the other workers' would fail every charge it cannot read.
          await assertPayloadKeysMatchWorkers(connection.workflowService, {
            namespace: config.TEMPORAL_NAMESPACE,
            taskQueue: chargeTaskQueue,
            protection: payloadProtection,
            log: wait.log,
          });
          const worker = await createChargeWorker({
            connection,
            namespace: config.TEMPORAL_NAMESPACE,
            ledger,
            payloadProtection,
            stickyScheduleToStartMs: config.WORKFLOW_STICKY_SCHEDULE_TO_START_MS,
            ...(workflowBundle ? { workflowBundle } : {}),
            // Provider charges go to the provider the environment configures (docs/providers.md).
            providers: configuredProviderConnectors(),
          });
          const bundled = workflowBundle ? `; workflows from ${workflowBundle.codePath}` : '';
          process.stderr.write(`worker polling task queue "charges" on ${config.TEMPORAL_ADDRESS} (${temporalSecurity.summary}${bundled})
`);
          const running = worker.run();
          // Webhook deliveries (docs/webhook-endpoints.md) run beside the charges, on their own pool.
          const deliverer = await startConfiguredDeliverer(config, config.DATABASE_URL, { log: wait.log });
          const stop = await waitForStopReason(safety, { 'the worker': running });
          await deliverer?.stop();
          failure = stop.error;
          // Temporal's Runtime stops its workers on SIGINT/SIGTERM by itself; shutting down a worker
          // that is already draining throws.
          if (worker.getState() === 'RUNNING') worker.shutdown();
          // A failure that stopped the command is reported by the throw below; one while draining is logged here.
          await running.catch((error: unknown) => {
            if (error !== failure) process.stderr.write(`the worker stopped with an error: ${(error as Error).message}\n`);
          });
        } finally {
          await connection.close();
        }
      } finally {
        await ledger.end();
      }
      if (failure !== undefined && process.exitCode === undefined) throw failure;
    });
}
