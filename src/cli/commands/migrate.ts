import type { Command } from 'commander';
import { loadConfig } from '../../config.js';
import { dependencyWaitLimitsFromConfig, migrateLedgerWhenReachable } from '../../runtime/app-context.js';
import { maskUrlPassword } from '../../support/redact.js';

/**
 * Migrates the ledger and exits: the one-shot job of a deployment whose long-running processes get
 * only the app role's DATABASE_URL (docs/operations.md, Database roles). Waits for PostgreSQL and
 * for another process's migration within the dependency-wait limits.
 */
export function registerMigrateCommand(program: Command): void {
  program
    .command('migrate')
    .description('migrate the ledger as MIGRATION_DATABASE_URL (the schema owner), or DATABASE_URL, and exit')
    .action(async () => {
      const config = loadConfig();
      const url = config.MIGRATION_DATABASE_URL ?? config.DATABASE_URL;
      if (!url) throw new Error('migrate needs MIGRATION_DATABASE_URL (the schema owner) or DATABASE_URL');
      const log = (line: string): void => void process.stderr.write(`${line}\n`);
      await migrateLedgerWhenReachable(url, { limits: dependencyWaitLimitsFromConfig(config), log });
      process.stderr.write(`ledger migrated (${maskUrlPassword(url, 'database URL')})\n`);
    });
}
