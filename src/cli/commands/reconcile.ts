import type { Command } from 'commander';
import { assertTenant } from '../../service/validation.js';
import { formatReconcileReport, reconcile, reconcileExitCode } from '../../reconcile/index.js';
import { addOutputOption, openCliContext, print, runCommand } from './surface.js';

export function registerReconcileCommand(program: Command): void {
  const command = program
    .command('reconcile')
    .description('check the ledger invariants and that every closed charge workflow matches its ledger row; exits 1 when anything is off')
    .option('--tenant <id>', 'only this tenant (default: all tenants)');
  addOutputOption(command);
  command.action((options: { tenant?: string; json?: boolean }) =>
    runCommand(options, async () => {
      if (options.tenant !== undefined) assertTenant(options.tenant);
      const context = await openCliContext();
      try {
        const report = await reconcile({ ledger: context.ledger, temporal: context.temporal, tenant: options.tenant ?? null });
        print(options, report, formatReconcileReport(report));
        process.exitCode = reconcileExitCode(report);
      } finally {
        await context.close();
      }
    }),
  );
}
