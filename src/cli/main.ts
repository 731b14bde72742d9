#!/usr/bin/env node
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { Command } from 'commander';
import { registerAccountsCommand } from './commands/accounts.js';
import { registerApiKeysCommand } from './commands/api-keys.js';
import { registerApiCommand } from './commands/api.js';
import { registerCancelCommand } from './commands/cancel.js';
import { registerCaptureCommand } from './commands/capture.js';
import { registerChargeCommand } from './commands/charge.js';
import { registerDemoCommand } from './commands/demo.js';
import { registerMcpCommand } from './commands/mcp.js';
import { registerMigrateCommand } from './commands/migrate.js';
import { registerReconcileCommand } from './commands/reconcile.js';
import { registerRefundCommand } from './commands/refund.js';
import { registerStatusCommand } from './commands/status.js';
import { registerStartCommand } from './commands/start.js';
import { registerWorkerCommand } from './commands/worker.js';
import { registerWebhookSecretsCommand } from './commands/webhook-secrets.js';
import { readDatabasePasswordsFromPasswordFile } from './database-password-file.js';

// Workers log at WARN: a command's own output should not drown in polling chatter.
Runtime.install({ logger: new DefaultLogger('WARN') });
readDatabasePasswordsFromPasswordFile();

const program = new Command()
  .name('chargeguard')
  .description('exactly-once charges for automated agents')
  .showHelpAfterError();

registerStartCommand(program);
registerWorkerCommand(program);
registerMigrateCommand(program);
registerDemoCommand(program);
registerApiCommand(program);
registerMcpCommand(program);
registerChargeCommand(program);
registerStatusCommand(program);
registerCancelCommand(program);
registerCaptureCommand(program);
registerRefundCommand(program);
registerAccountsCommand(program);
registerApiKeysCommand(program);
registerWebhookSecretsCommand(program);
registerReconcileCommand(program);

program.parseAsync(process.argv).catch((error: unknown) => {
  process.stderr.write(`error: ${(error as Error).message}\n`);
  process.exitCode = 1;
});
