import type { Command } from 'commander';
import { providerNames, type ProviderName } from '../../domain/providers.js';
import { configuredProviderConnectors, ProviderConfigurationError } from '../../providers/configured.js';
import { providerFolders } from '../../providers/registry.js';
import { assertTenant } from '../../domain/identifiers.js';
import {
  assertWindowHours,
  formatProviderReconcileReport,
  formatReconcileReport,
  providerReconcileExitCode,
  providerReconcileWindowHoursDefault,
  providerReconcileWindowHoursMax,
  reconcileDefaults,
  reconcileExitCode,
  reconcileStatementTimeoutMsMax,
} from '../../reconcile/index.js';
import { loadConfig } from '../../config.js';
import { addOutputOption, openCliContext, openCliLedger, print, runCommand, UsageError } from './surface.js';

interface ReconcileOptions {
  tenant?: string;
  json?: boolean;
  provider?: string;
  windowHours?: string;
  voidOrphans?: boolean;
  statementTimeoutMs?: string;
}

export function registerReconcileCommand(program: Command): void {
  const command = program
    .command('reconcile')
    .description(
      'check the ledger invariants and that every closed charge workflow matches its ledger row; with --provider, ' +
        "compare the provider's payments with the ledger's provider charges instead; exits 1 when anything is off",
    )
    .option('--tenant <id>', 'only this tenant (default: all tenants)')
    .option('--provider <name>', `reconcile with a payment provider (${providerNames.join(', ')}), configured from the environment (docs/providers.md)`)
    .option('--window-hours <n>', `with --provider: payments created in the last n hours (default ${providerReconcileWindowHoursDefault}, at most the provider's longest authorization in hours, docs/providers.md)`)
    .option('--void-orphans', "with --provider: void each payment still held for a cancelled or declined charge, and each duplicate payment of a succeeded charge, and say what was voided")
    .option(
      '--statement-timeout-ms <ms>',
      `the ledger checks: how long one statement (one batch of a check) may run before reconcile stops naming the check (default ${reconcileDefaults.reconcileStatementTimeoutMs}, at most ${reconcileStatementTimeoutMsMax})`,
    );
  addOutputOption(command);
  command.action((options: ReconcileOptions) =>
    runCommand(options, async () => {
      if (options.tenant !== undefined) assertTenant(options.tenant);
      if (options.provider !== undefined) {
        if (options.statementTimeoutMs !== undefined) throw new UsageError('--statement-timeout-ms is for the ledger checks, not --provider');
        return reconcileWithProvider(options, options.provider);
      }
      if (options.windowHours !== undefined || options.voidOrphans) throw new UsageError('--window-hours and --void-orphans need --provider');
      const reconcileStatementTimeoutMs = statementTimeoutOption(options.statementTimeoutMs);
      const context = await openCliContext();
      try {
        const report = await context.reconciliation.ledgerAndWorkflows({ tenant: options.tenant ?? null, reconcileStatementTimeoutMs });
        print(options, report, formatReconcileReport(report));
        process.exitCode = reconcileExitCode(report);
      } finally {
        await context.close();
      }
    }),
  );
}

function statementTimeoutOption(text: string | undefined): number {
  if (text === undefined) return reconcileDefaults.reconcileStatementTimeoutMs;
  const ms = /^\d+$/.test(text.trim()) ? Number(text) : Number.NaN;
  if (!Number.isSafeInteger(ms) || ms < 1 || ms > reconcileStatementTimeoutMsMax) {
    throw new UsageError(`--statement-timeout-ms must be a whole number of ms from 1 to ${reconcileStatementTimeoutMsMax}`);
  }
  return ms;
}

function windowHoursOption(text: string | undefined, maxHours: number): number {
  if (text === undefined) return providerReconcileWindowHoursDefault;
  try {
    if (!/^\d+$/.test(text.trim())) throw new RangeError(`--window-hours must be a whole number of hours from 1 to ${maxHours}`);
    return assertWindowHours(Number(text), maxHours);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

async function reconcileWithProvider(options: ReconcileOptions, name: string): Promise<void> {
  const provider = providerNames.find((known) => known === name) as ProviderName | undefined;
  if (!provider) throw new UsageError(`--provider must be one of ${providerNames.join(', ')}`);
  let connector;
  try {
    connector = configuredProviderConnectors()[provider];
  } catch (error) {
    if (error instanceof ProviderConfigurationError) throw new UsageError(error.message);
    throw error;
  }
  if (!connector) throw new UsageError(`no ${provider} connector is configured: ${providerFolders[provider].settingsHint} (docs/providers.md, "Configuration")`);
  const windowHours = windowHoursOption(options.windowHours, providerReconcileWindowHoursMax(connector));
  const services = await openCliLedger();
  try {
    const report = await services.reconciliation.provider({
      connector,
      tenant: options.tenant ?? null,
      windowHours,
      voidOrphans: options.voidOrphans ?? false,
      // An automatic charge's payer may act until its creation plus the workers' hold TTL.
      holdTtlMs: loadConfig().HOLD_TTL_MS,
    });
    print(options, report, formatProviderReconcileReport(report));
    process.exitCode = providerReconcileExitCode(report);
  } finally {
    await services.close();
  }
}
