import type { Command } from 'commander';
import type { ApiKeyLimits, ApiKeyRecord } from '../../auth/api-keys.js';
import { rateLimitBounds } from '../../domain/rate-limits.js';
import { defaultRole, isRole, roles, type Role } from '../../domain/permissions.js';
import { NotFoundError, ValidationError, type FieldError } from '../../domain/errors.js';
import { accountIdProblem, assertText } from '../../service/validation.js';
import { assertTenant } from '../../domain/identifiers.js';
import { limits } from '../../domain/limits.js';
import { hasMandate, type Mandate } from '../../domain/mandate.js';
import { addOutputOption, addTenantOption, openCliLedger, print, runCommand, tenantFrom } from './surface.js';

function describeMandate(mandate: Mandate): string {
  if (!hasMandate(mandate)) return 'mandate none';
  const rules = [
    mandate.maxAmountMinor !== null ? `max amount ${mandate.maxAmountMinor}` : null,
    mandate.dailyLimitMinor !== null ? `daily limit ${mandate.dailyLimitMinor}` : null,
    mandate.allowedPayeeAccountIds !== null ? `payees ${mandate.allowedPayeeAccountIds.join(',')}` : null,
    mandate.currency !== null ? `currency ${mandate.currency}` : null,
    mandate.expiresAt !== null ? `expires ${mandate.expiresAt}` : null,
  ];
  return `mandate ${rules.filter((rule) => rule !== null).join(', ')}`;
}

function describeLimits(limits: ApiKeyLimits): string {
  const or = (value: number | null) => (value === null ? 'default' : String(value));
  return `limits ${or(limits.ratePerSecond)} req/s, burst ${or(limits.burst)}, open holds ${or(limits.maxOpenHolds)}`;
}

/** The key's own limits the flags ask for (absent: the configured default); every bad flag is named at once. */
function limitsOptions(options: LimitOptions): ApiKeyLimits {
  const errors: FieldError[] = [];
  const whole = (text: string | undefined, field: string, max: number): number | null => {
    if (text === undefined) return null;
    const value = /^[0-9]{1,7}$/.test(text) ? Number(text) : NaN;
    if (value >= 1 && value <= max) return value;
    errors.push({ field, message: `must be a whole number from 1 to ${max}` });
    return null;
  };
  const chosen = {
    ratePerSecond: whole(options.ratePerSecond, '--rate-per-second', rateLimitBounds.ratePerSecondMax),
    burst: whole(options.burst, '--burst', rateLimitBounds.burstMax),
    maxOpenHolds: whole(options.maxOpenHolds, '--max-open-holds', rateLimitBounds.maxOpenHoldsMax),
  };
  if (errors.length > 0) throw new ValidationError(errors);
  return chosen;
}

interface LimitOptions {
  ratePerSecond?: string;
  burst?: string;
  maxOpenHolds?: string;
}

function describeKey(key: ApiKeyRecord): string {
  return (
    `${key.id}  tenant ${key.tenant}  role ${key.role}  ${key.keyPrefix}…  ${key.label ?? ''}  ${describeMandate(key.mandate)}  ${describeLimits(key.limits)}  ` +
    `signatures ${key.requiresSignature ? 'required' : 'not required'}  ` +
    `created ${key.createdAt}  last used ${key.lastUsedAt ?? 'never'}${key.revokedAt ? `  REVOKED ${key.revokedAt}` : ''}`
  );
}

function mandateToJson(mandate: Mandate) {
  return {
    max_amount: mandate.maxAmountMinor,
    daily_limit: mandate.dailyLimitMinor,
    payees: mandate.allowedPayeeAccountIds,
    currency: mandate.currency,
    expires_at: mandate.expiresAt,
  };
}

interface MandateOptions {
  maxAmount?: string;
  dailyLimit?: string;
  payees?: string;
  currency?: string;
  expiresAt?: string;
}

/** The mandate the flags ask for; every bad flag is named at once. */
function mandateOptions(options: MandateOptions, nowMs: number): Mandate {
  const errors: FieldError[] = [];
  const amount = (text: string | undefined, field: string): number | null => {
    if (text === undefined) return null;
    const value = /^[0-9]{1,16}$/.test(text) ? Number(text) : NaN;
    if (Number.isSafeInteger(value) && value >= 1) return value;
    errors.push({ field, message: 'must be a whole number of minor units, at least 1' });
    return null;
  };
  const maxAmountMinor = amount(options.maxAmount, '--max-amount');
  const dailyLimitMinor = amount(options.dailyLimit, '--daily-limit');
  let payees: string[] | null = null;
  if (options.payees !== undefined) {
    payees = options.payees.split(',').map((id) => id.trim());
    const problem = payees.map(accountIdProblem).find((p) => p !== null);
    if (problem) errors.push({ field: '--payees', message: `account ids separated by commas: ${problem}` });
  }
  if (options.currency !== undefined && !/^[A-Z]{3}$/.test(options.currency)) {
    errors.push({ field: '--currency', message: 'must be an ISO 4217 code in upper case, e.g. USD' });
  }
  let expiresAt: string | null = null;
  if (options.expiresAt !== undefined) {
    const ms = /^\d{4}-\d{2}-\d{2}T/.test(options.expiresAt) ? Date.parse(options.expiresAt) : NaN;
    if (Number.isNaN(ms)) {
      errors.push({ field: '--expires-at', message: 'must be an ISO 8601 date-time, e.g. 2027-01-31T00:00:00Z' });
    } else if (ms <= nowMs) {
      errors.push({ field: '--expires-at', message: 'must be in the future' });
    } else {
      expiresAt = new Date(ms).toISOString();
    }
  }
  if (errors.length > 0) throw new ValidationError(errors);
  return { maxAmountMinor, dailyLimitMinor, allowedPayeeAccountIds: payees, currency: options.currency ?? null, expiresAt };
}

function keyToJson(key: ApiKeyRecord) {
  return {
    id: key.id,
    tenant: key.tenant,
    role: key.role,
    key_prefix: key.keyPrefix,
    label: key.label,
    created_at: key.createdAt,
    last_used_at: key.lastUsedAt,
    revoked_at: key.revokedAt,
    mandate: mandateToJson(key.mandate),
    require_signature: key.requiresSignature,
    limits: { rate_per_second: key.limits.ratePerSecond, burst: key.limits.burst, max_open_holds: key.limits.maxOpenHolds },
  };
}

function roleOption(text: string | undefined): Role {
  if (text === undefined) return defaultRole;
  if (!isRole(text)) throw new ValidationError([{ field: '--role', message: `must be one of ${roles.join(', ')}` }]);
  return text;
}

function keyIdArgument(id: string): string {
  return assertText(id, '<key-id>', { minLength: 1, maxLength: 64 });
}

export function registerApiKeysCommand(program: Command): void {
  const keys = program.command('api-keys').description('per-tenant API keys for the HTTP API and MCP over HTTP (stored as hashes only)');

  const create = keys
    .command('create')
    .description('create a key; it is printed once and cannot be shown again')
    .option('--label <text>', 'what the key is for')
    .option(
      '--role <role>',
      'agent (default): create, read, cancel, capture and refund charges, read accounts; admin: also open accounts, deposit, manage keys',
    )
    .option('--max-amount <minor>', 'mandate: the largest single charge, in minor units')
    .option('--daily-limit <minor>', 'mandate: the most the key may charge in any 24 h, in minor units')
    .option('--payees <ids>', 'mandate: the only payee accounts it may charge to, comma-separated')
    .option('--currency <code>', 'mandate: the only currency it may charge in')
    .option('--expires-at <iso>', 'the key stops working at this instant (ISO 8601)')
    .option('--require-signature', 'accept only requests signed (RFC 9421, hmac-sha256) with a signing secret, printed once with the key')
    .option('--rate-per-second <n>', 'requests per second this key may make, refilling its burst (default: RATE_LIMIT_KEY_PER_SECOND)')
    .option('--burst <n>', 'requests this key may make at once (default: RATE_LIMIT_KEY_BURST)')
    .option('--max-open-holds <n>', 'charges of this key holding money at once (default: OPEN_HOLDS_KEY_MAX)');
  addTenantOption(create);
  addOutputOption(create);
  create.action((options: { tenant?: string; label?: string; role?: string; json?: boolean; requireSignature?: boolean } & MandateOptions & LimitOptions) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      const label = options.label === undefined ? null : assertText(options.label, '--label', { maxLength: limits.apiKeyLabelMaxLength });
      const role = roleOption(options.role);
      const mandate = mandateOptions(options, Date.now());
      const keyLimits = limitsOptions(options);
      const cli = await openCliLedger();
      try {
        const signing = { requireSignature: options.requireSignature === true };
        const { key, record, signingSecret } = await cli.keys.create(tenant, label, role, mandate, signing, keyLimits);
        print(
          options,
          { ...keyToJson(record), key, ...(signingSecret !== null ? { signing_secret: signingSecret } : {}) },
          signingSecret === null
            ? `${key}\n(${record.id}, ${role} key for tenant ${tenant}, ${describeMandate(record.mandate)}: store it now, it is not kept in clear)`
            : `${key}\n${signingSecret}\n(${record.id}, ${role} key for tenant ${tenant}, ${describeMandate(record.mandate)}, signed requests required: ` +
              'store the key and its signing secret (second line) now, neither is shown again)',
        );
      } finally {
        await cli.close();
      }
    }),
  );

  const list = keys.command('list').description('keys (prefixes only), all tenants unless --tenant');
  list.option('--tenant <id>', 'only this tenant');
  addOutputOption(list);
  list.action((options: { tenant?: string; json?: boolean }) =>
    runCommand(options, async () => {
      if (options.tenant !== undefined) assertTenant(options.tenant);
      const cli = await openCliLedger();
      try {
        const found = await cli.keys.list(options.tenant ?? null);
        print(options, found.map(keyToJson), found.length === 0 ? 'no keys' : found.map(describeKey).join('\n'));
      } finally {
        await cli.close();
      }
    }),
  );

  const show = keys.command('show').description('one key: role, mandate, created, last used, revoked (by its id, key_…)').argument('<key-id>');
  addOutputOption(show);
  show.action((id: string, options: { json?: boolean }) =>
    runCommand(options, async () => {
      keyIdArgument(id);
      const cli = await openCliLedger();
      try {
        const found = await cli.keys.get(id);
        if (!found) throw new NotFoundError(`no API key ${id}`);
        print(options, keyToJson(found), describeKey(found));
      } finally {
        await cli.close();
      }
    }),
  );

  const revoke = keys.command('revoke').description('revoke a key at once (by its id, key_…)').argument('<key-id>');
  addOutputOption(revoke);
  revoke.action((id: string, options: { json?: boolean }) =>
    runCommand(options, async () => {
      keyIdArgument(id);
      const cli = await openCliLedger();
      try {
        const revoked = await cli.keys.revoke(id);
        if (!revoked) throw new NotFoundError(`no API key ${id}`);
        print(options, keyToJson(revoked), describeKey(revoked));
      } finally {
        await cli.close();
      }
    }),
  );
}
