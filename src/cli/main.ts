#!/usr/bin/env node
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { Command } from 'commander';
import { registerDemoCommand } from './commands/demo.js';
import { registerStartCommand } from './commands/start.js';
import { registerWorkerCommand } from './commands/worker.js';

// Workers log at WARN: a command's own output should not drown in polling chatter.
Runtime.install({ logger: new DefaultLogger('WARN') });

const program = new Command()
  .name('chargeguard')
  .description('exactly-once charges for automated agents')
  .showHelpAfterError();

registerStartCommand(program);
registerWorkerCommand(program);
registerDemoCommand(program);

program.parseAsync(process.argv).catch((error: unknown) => {
  process.stderr.write(`error: ${(error as Error).message}\n`);
  process.exitCode = 1;
});
