import type { Command } from 'commander';
import { ChargeguardError, ValidationError } from '../../domain/errors.js';
import { exitCodes } from '../../domain/error-kinds.js';
import { asUnavailable } from '../../service/unavailable.js';
import { assertTenant } from '../../domain/identifiers.js';
import { loadConfig } from '../../config.js';
import { openAppContext, openLedgerServices, type AppContext, type LedgerServices } from '../../runtime/app-context.js';

/**
 * What the charge, account and key commands share: where the servers are, which tenant, how to
 * print, and one exit code per kind of failure (the error kind's, src/domain/error-kinds.ts) so
 * scripts can tell "retry" from "fix the request" from "not allowed".
 */

export { exitCodes };

export interface OutputOptions {
  json?: boolean;
}

export function addOutputOption(command: Command): Command {
  return command.option('--json', 'print JSON (for scripts) instead of a human summary');
}

export function addTenantOption(command: Command): Command {
  return command.option('--tenant <id>', 'tenant to act for (default: $CHARGEGUARD_TENANT)');
}

/** The tenant, checked before any connection is opened: a bad flag costs nothing. */
export function tenantFrom(options: { tenant?: string }): string {
  const tenant = options.tenant ?? process.env.CHARGEGUARD_TENANT;
  if (!tenant) throw new UsageError('--tenant is required (or set CHARGEGUARD_TENANT)');
  return assertTenant(tenant);
}

export class UsageError extends Error {}

function requireEndpoint(name: 'TEMPORAL_ADDRESS' | 'DATABASE_URL', value: string | undefined): string {
  if (!value) {
    throw new UsageError(`${name} is not set: point it at the servers \`chargeguard start\` printed (or at your own)`);
  }
  return value;
}

/** Temporal and the ledger, for commands that run charges. */
export async function openCliContext(): Promise<AppContext> {
  const config = loadConfig();
  return openAppContext(config, {
    temporalAddress: requireEndpoint('TEMPORAL_ADDRESS', config.TEMPORAL_ADDRESS),
    databaseUrl: requireEndpoint('DATABASE_URL', config.DATABASE_URL),
    migrationDatabaseUrl: config.MIGRATION_DATABASE_URL,
  });
}

/** The ledger's services alone, for commands that only touch accounts, keys and secrets. */
export async function openCliLedger(): Promise<LedgerServices> {
  const config = loadConfig();
  return openLedgerServices(config, {
    databaseUrl: requireEndpoint('DATABASE_URL', config.DATABASE_URL),
    migrationDatabaseUrl: config.MIGRATION_DATABASE_URL,
  });
}

export function print(options: OutputOptions, value: unknown, human: string): void {
  process.stdout.write(options.json ? `${JSON.stringify(value, null, 2)}\n` : `${human}\n`);
}

/** A wait in whole milliseconds, 0 or more. */
export function millisecondsOption(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(value)) {
    throw new ValidationError([{ field: flag, message: 'must be a whole number of milliseconds, 0 or more' }]);
  }
  return value;
}

/** Parses an integer option in minor units; the service judges the range. */
export function minorUnitsOption(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!/^-?\d+$/.test(text.trim()) || !Number.isSafeInteger(value)) {
    throw new ValidationError([{ field: flag, message: 'must be an integer number of minor units (cents)' }]);
  }
  return value;
}

/** Runs a command body, printing a failure the way the command's output mode asks, with its exit code. */
export async function runCommand(options: OutputOptions, body: () => Promise<void>): Promise<void> {
  try {
    await body();
  } catch (raw) {
    const error = asUnavailable(raw);
    const code = exitCodeFor(error);
    if (options.json) {
      const payload: Record<string, unknown> = {
        error: {
          ...(error instanceof ChargeguardError ? error.extensions() : {}),
          type: error instanceof ChargeguardError ? error.code : error instanceof UsageError ? 'usage' : 'internal_error',
          detail: (error as Error).message,
        },
      };
      process.stdout.write(`${JSON.stringify(payload, null, 2)}\n`);
    } else {
      process.stderr.write(`error: ${(error as Error).message}\n`);
      if (error instanceof ChargeguardError && error.kind.retry === 'retry_same_key') {
        process.stderr.write('retry the same command later: it will not run twice\n');
      }
    }
    process.exitCode = code;
  }
}

/** The error kind's exit code (src/domain/error-kinds.ts); a bad flag is an invalid request. */
export function exitCodeFor(error: unknown): number {
  if (error instanceof ChargeguardError) return error.kind.exitCode;
  if (error instanceof UsageError) return exitCodes.invalid;
  return exitCodes.failed;
}

export function describeCharge(charge: {
  id: string;
  status: string;
  amount: number;
  amount_captured: number;
  amount_refunded: number;
  currency: string;
  payer_account_id: string;
  payee_account_id: string;
  idempotency_key: string;
  decline_code?: string;
  failure_reason?: string;
  payment_method?: string;
  provider?: { name: string; payment_id: string | null; state: string | null; decline_code: string | null };
  next_action: unknown;
}): string {
  const why = charge.decline_code ?? charge.failure_reason;
  // A provider charge's payer is its payment method (the clearing account is the ledger's side of it).
  const payer = charge.payment_method ?? charge.payer_account_id;
  const lines = [
    `${charge.id}  ${charge.status}${why ? ` (${why})` : ''}  ${charge.amount} ${charge.currency} minor units  ` +
      `${payer} -> ${charge.payee_account_id}  captured ${charge.amount_captured}, refunded ${charge.amount_refunded}  ` +
      `key ${charge.idempotency_key}`,
  ];
  const provider = charge.provider;
  if (provider) {
    lines.push(
      `  ${provider.name}: payment ${provider.payment_id ?? '(none yet)'}, ${provider.state ?? 'nothing sent yet'}` +
        `${provider.decline_code ? `, declined: ${provider.decline_code}` : ''}  (ledger payer ${charge.payer_account_id})`,
    );
  }
  if (charge.status === 'requires_action') {
    lines.push(`  the payer must act (3-D Secure), then run status again: next_action ${JSON.stringify(charge.next_action)}`);
  }
  return lines.join('\n');
}
