import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { authorize, type Principal } from '../auth/principal.js';
import type { Operation } from '../domain/permissions.js';
import type { ApiKeyService } from '../service/api-key-service.js';
import { UnauthorizedError, ValidationError } from '../domain/errors.js';
import { assertTenant } from '../domain/identifiers.js';

/**
 * Who a command (charge, refund, capture, cancel) or the stdio MCP server acts as.
 *
 * With an API key: that key, looked up and checked as the HTTP API does (src/auth/api-keys.ts:
 * unknown, revoked or expired is refused; its role is asked about the operation, its mandate judges
 * each charge), so what the command records names the key (`created_by_key_id`) and the ledger
 * judges it as it judges the key's HTTP requests. A key that requires signed requests is accepted
 * here unsigned: whoever runs the CLI already reaches the database, which a signature protects
 * nothing against.
 *
 * Without one: the operator, for the tenant named by --tenant or $CHARGEGUARD_TENANT. The ledger
 * lets the operator move money only in a tenant that never had a key (docs/back-door.md, "Who acts
 * without a key"), so a charge or refund in any other tenant is refused here, before anything is
 * started, naming the setting that would make it work.
 *
 * The key is read from the environment ($CHARGEGUARD_API_KEY) or from a file (--api-key-file,
 * $CHARGEGUARD_API_KEY_FILE), never from the command line: arguments are readable by every user of
 * the machine (ps, /proc/<pid>/cmdline) and land in shell history. It is never printed or logged.
 */

export const apiKeyVariable = 'CHARGEGUARD_API_KEY';
export const apiKeyFileVariable = 'CHARGEGUARD_API_KEY_FILE';

/** How to say which key to use, for messages that ask for one. */
export const apiKeySettings = `${apiKeyVariable} (or ${apiKeyFileVariable}, or --api-key-file)`;

/** What identifying needs of the key store: who a key acts as, and whether a tenant has keys. */
export type KeyLookup = Pick<ApiKeyService, 'principalFor' | 'list'>;

export interface IdentityOptions {
  tenant?: string;
  apiKeyFile?: string;
}

/** --tenant, optional with a key, and --api-key-file: who acts. */
export function addIdentityOptions(command: Command): Command {
  command.option('--tenant <id>', "tenant to act for (default: the API key's, else $CHARGEGUARD_TENANT)");
  return command.option(
    '--api-key-file <path>',
    `act as the API key in this file (default: $${apiKeyVariable}, else the file $${apiKeyFileVariable}); ` +
      'never the key itself on the command line, where other users of the machine can read it',
  );
}

/** The key the command acts with, or null: read before anything is opened, so a bad file costs nothing. */
export function apiKeyFrom(options: { apiKeyFile?: string }, env: NodeJS.ProcessEnv = process.env): string | null {
  // The flag names this command's key; of the variables, the key itself wins over a file's name.
  const [file, field] =
    options.apiKeyFile !== undefined
      ? [options.apiKeyFile, '--api-key-file']
      : env[apiKeyVariable]
        ? [null, apiKeyVariable]
        : [env[apiKeyFileVariable] || null, apiKeyFileVariable];
  if (file === null) return field === apiKeyVariable ? env[apiKeyVariable]!.trim() : null;
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new ValidationError([{ field, message: `cannot read ${JSON.stringify(file)}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}` }]);
  }
  const key = text.trim();
  if (key === '') throw new ValidationError([{ field, message: `${JSON.stringify(file)} is empty: it should hold one API key` }]);
  return key;
}

/** The tenant the options name (--tenant, else $CHARGEGUARD_TENANT), checked, or undefined. */
function namedTenant(options: IdentityOptions, env: NodeJS.ProcessEnv): { tenant: string; field: string } | undefined {
  if (options.tenant !== undefined) return { tenant: assertTenant(options.tenant), field: '--tenant' };
  const fromEnv = env.CHARGEGUARD_TENANT;
  return fromEnv ? { tenant: assertTenant(fromEnv), field: 'CHARGEGUARD_TENANT' } : undefined;
}

/**
 * Whether the options can name anyone at all, checked before any connection is opened: a key (or
 * its file), or a tenant.
 */
export function assertIdentityNamed(options: IdentityOptions, env: NodeJS.ProcessEnv = process.env): void {
  if (apiKeyFrom(options, env) !== null) return;
  if (namedTenant(options, env) === undefined) {
    throw new ValidationError([{ field: '--tenant', message: `say who acts: set ${apiKeySettings}, or name the tenant with --tenant or CHARGEGUARD_TENANT` }]);
  }
}

/** Who a key acts as, now: null-safe and without the key's signing secret, as the API's authentication hands it on. */
export async function principalOfKey(keys: KeyLookup, key: string): Promise<Principal> {
  const found = await keys.principalFor(key);
  if (found === null) throw new UnauthorizedError(`the API key in ${apiKeySettings} is unknown, revoked or expired`);
  const { signingSecret: _signingSecret, ...principal } = found;
  return principal;
}

/**
 * Who the options name, checked now: the key's principal (its tenant must be the one named, if one
 * is), or the operator for the named tenant.
 */
export async function identify(keys: KeyLookup, options: IdentityOptions, env: NodeJS.ProcessEnv = process.env): Promise<Principal> {
  const key = apiKeyFrom(options, env);
  const named = namedTenant(options, env);
  if (key !== null) {
    const principal = await principalOfKey(keys, key);
    if (named !== undefined && named.tenant !== principal.tenant) {
      throw new ValidationError([
        { field: named.field, message: `names tenant ${named.tenant}, but the API key belongs to another tenant: leave it out, or use a key of ${named.tenant}` },
      ]);
    }
    return principal;
  }
  if (named === undefined) {
    throw new ValidationError([{ field: '--tenant', message: `say who acts: set ${apiKeySettings}, or name the tenant with --tenant or CHARGEGUARD_TENANT` }]);
  }
  // The operator acts as an agent key would: it moves money that exists, it creates none.
  return { tenant: named.tenant, keyId: null, role: 'agent' };
}

/**
 * The principal for one command, allowed to perform `operation`: the key's role asked as the HTTP
 * API asks it, or the operator in a tenant where the ledger lets the operator act.
 */
export async function resolvePrincipal(
  keys: KeyLookup,
  options: IdentityOptions,
  operation: Operation,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Principal> {
  const principal = await identify(keys, options, env);
  await assertMayPerform(keys, principal, operation);
  return principal;
}

/** The key's role allows the operation; without a key, the ledger would let the operator do it. */
export async function assertMayPerform(keys: KeyLookup, principal: Principal, operation: Operation): Promise<void> {
  authorize(principal, operation);
  await assertOperatorMayAct(keys, principal, operation);
}

/** Whether the operator (no key) may still charge and refund in the tenant: it never had a key. */
export async function operatorMayMoveMoney(keys: KeyLookup, tenant: string): Promise<boolean> {
  // Revoked keys count: revoking them all does not reopen the tenant to keyless money movements.
  return (await keys.list(tenant)).length === 0;
}

/** What the ledger refuses to do without a key in a tenant that has (or had) one. */
const keyedOperations: ReadonlySet<Operation> = new Set<Operation>(['charges.create', 'refunds.create']);

/**
 * Refuses, before anything starts, a charge or refund without a key in a tenant that has or ever had
 * one: the ledger would decline the charge (`key_not_authorized`, recorded under its idempotency
 * key for good) or refuse the refund (RefundNotAuthorized). Anyone with a key is left to the ledger.
 */
export async function assertOperatorMayAct(keys: KeyLookup, principal: Principal, operation: Operation): Promise<void> {
  if (principal.keyId !== null || !keyedOperations.has(operation)) return;
  if (await operatorMayMoveMoney(keys, principal.tenant)) return;
  throw new UnauthorizedError(
    `tenant ${principal.tenant} has API keys, so the ledger moves its money only for one of them: set ${apiKeySettings} ` +
      `to a key of this tenant (\`chargeguard api-keys create --tenant ${principal.tenant}\` makes one); nothing was started`,
  );
}
