#!/usr/bin/env node
import nodeModule from 'node:module';
import { Command } from 'commander';
import { readDatabasePasswordsFromPasswordFile } from './database-password-file.js';

// Node 22.1+: V8 keeps the compiled code of every module a command loads (in NODE_COMPILE_CACHE,
// else the OS temp folder), so the next process skips compiling them: a worker restarted after a
// crash polls sooner (docs/operations.md, How fast a worker is back). Here and not only in the bin
// launcher, because the image and the supervisors run this file directly. A no-op on Node 20.
(nodeModule as { enableCompileCache?: () => unknown }).enableCompileCache?.();

/**
 * The commands, in the order help lists them, each loaded only when it runs: a command's module
 * brings the service, the ledger and Temporal's client (or worker) with it, and importing all of
 * them cost every call seconds. A call names its command, so only that module is imported; help
 * without a command, or a name that is none of these, loads them all.
 */
const commands: Array<readonly [name: string, load: () => Promise<(program: Command) => void>]> = [
  ['start', async () => (await import('./commands/start.js')).registerStartCommand],
  ['worker', async () => (await import('./commands/worker.js')).registerWorkerCommand],
  ['migrate', async () => (await import('./commands/migrate.js')).registerMigrateCommand],
  ['demo', async () => (await import('./commands/demo.js')).registerDemoCommand],
  ['api', async () => (await import('./commands/api.js')).registerApiCommand],
  ['mcp', async () => (await import('./commands/mcp.js')).registerMcpCommand],
  ['charge', async () => (await import('./commands/charge.js')).registerChargeCommand],
  ['status', async () => (await import('./commands/status.js')).registerStatusCommand],
  ['cancel', async () => (await import('./commands/cancel.js')).registerCancelCommand],
  ['capture', async () => (await import('./commands/capture.js')).registerCaptureCommand],
  ['refund', async () => (await import('./commands/refund.js')).registerRefundCommand],
  ['accounts', async () => (await import('./commands/accounts.js')).registerAccountsCommand],
  ['events', async () => (await import('./commands/events.js')).registerEventsCommand],
  ['api-keys', async () => (await import('./commands/api-keys.js')).registerApiKeysCommand],
  ['webhook-secrets', async () => (await import('./commands/webhook-secrets.js')).registerWebhookSecretsCommand],
  ['webhook-endpoints', async () => (await import('./commands/webhook-endpoints.js')).registerWebhookEndpointsCommand],
  ['reconcile', async () => (await import('./commands/reconcile.js')).registerReconcileCommand],
  ['consume', async () => (await import('./commands/consume.js')).registerConsumeCommand],
];

/** The commands that run a Temporal worker in this process, whose runtime is set up before it starts. */
const workerCommands = new Set(['start', 'worker', 'demo']);

/** The program with the commands `argv` needs: the one it names, or all of them. */
export async function buildProgram(argv: readonly string[]): Promise<Command> {
  const named = commands.find(([name]) => name === argv[2]);
  const selected = named === undefined ? commands : [named];
  if (selected.some(([name]) => workerCommands.has(name))) {
    // Workers log at WARN: a command's own output should not drown in polling chatter.
    const { DefaultLogger, Runtime } = await import('@temporalio/worker');
    Runtime.install({ logger: new DefaultLogger('WARN') });
  }
  const program = new Command().name('chargeguard').description('exactly-once charges for automated agents').showHelpAfterError();
  for (const register of await Promise.all(selected.map(([, load]) => load()))) register(program);
  return program;
}

readDatabasePasswordsFromPasswordFile();

buildProgram(process.argv)
  .then((program) => program.parseAsync(process.argv))
  .catch((error: unknown) => {
    process.stderr.write(`error: ${(error as Error).message}\n`);
    process.exitCode = 1;
  });
