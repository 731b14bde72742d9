#!/usr/bin/env node
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { Command } from 'commander';
import { readDatabasePasswordsFromPasswordFile } from './database-password-file.js';

// Workers log at WARN: a command's own output should not drown in polling chatter.
Runtime.install({ logger: new DefaultLogger('WARN') });
readDatabasePasswordsFromPasswordFile();

const program = new Command()
  .name('chargeguard')
  .description('exactly-once charges for automated agents')
  .showHelpAfterError();

/**
 * Every command, in the order help lists them, each loaded only when needed: a process runs one
 * command, and a worker that loaded the API's and the MCP server's modules too (fastify, the MCP
 * SDK) took about a second longer to start polling on a loaded 2-core machine
 * (bench/experiments/worker-start.ts). Help, and anything that is not a command name, loads all.
 */
const commands: ReadonlyArray<readonly [string, () => Promise<(program: Command) => void>]> = [
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
  ['api-keys', async () => (await import('./commands/api-keys.js')).registerApiKeysCommand],
  ['webhook-secrets', async () => (await import('./commands/webhook-secrets.js')).registerWebhookSecretsCommand],
  ['reconcile', async () => (await import('./commands/reconcile.js')).registerReconcileCommand],
];
const named = commands.filter(([name]) => name === process.argv[2]);
for (const register of await Promise.all((named.length === 1 ? named : commands).map(([, load]) => load()))) register(program);

program.parseAsync(process.argv).catch((error: unknown) => {
  process.stderr.write(`error: ${(error as Error).message}\n`);
  process.exitCode = 1;
});
