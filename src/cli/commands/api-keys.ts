import type { Command } from 'commander';
import { createApiKey, getApiKey, listApiKeys, revokeApiKey, type ApiKeyRecord } from '../../auth/api-keys.js';
import { defaultRole, isRole, roles, type Role } from '../../domain/permissions.js';
import { NotFoundError, ValidationError } from '../../service/errors.js';
import { assertTenant, assertText } from '../../service/validation.js';
import { limits } from '../../domain/limits.js';
import { addOutputOption, addTenantOption, openCliLedger, print, runCommand, tenantFrom } from './surface.js';

function describeKey(key: ApiKeyRecord): string {
  return (
    `${key.id}  tenant ${key.tenant}  role ${key.role}  ${key.keyPrefix}…  ${key.label ?? ''}  created ${key.createdAt}  ` +
    `last used ${key.lastUsedAt ?? 'never'}${key.revokedAt ? `  REVOKED ${key.revokedAt}` : ''}`
  );
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
    );
  addTenantOption(create);
  addOutputOption(create);
  create.action((options: { tenant?: string; label?: string; role?: string; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      const label = options.label === undefined ? null : assertText(options.label, '--label', { maxLength: limits.apiKeyLabelMaxLength });
      const role = roleOption(options.role);
      const cli = await openCliLedger();
      try {
        const { key, record } = await createApiKey(cli.ledger, tenant, label, role);
        print(options, { ...keyToJson(record), key }, `${key}\n(${record.id}, ${role} key for tenant ${tenant}: store it now, it is not kept in clear)`);
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
        const found = await listApiKeys(cli.ledger, options.tenant ?? null);
        print(options, found.map(keyToJson), found.length === 0 ? 'no keys' : found.map(describeKey).join('\n'));
      } finally {
        await cli.close();
      }
    }),
  );

  const show = keys.command('show').description('one key: role, created, last used, revoked (by its id, key_…)').argument('<key-id>');
  addOutputOption(show);
  show.action((id: string, options: { json?: boolean }) =>
    runCommand(options, async () => {
      keyIdArgument(id);
      const cli = await openCliLedger();
      try {
        const found = await getApiKey(cli.ledger, id);
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
        const revoked = await revokeApiKey(cli.ledger, id);
        if (!revoked) throw new NotFoundError(`no API key ${id}`);
        print(options, keyToJson(revoked), describeKey(revoked));
      } finally {
        await cli.close();
      }
    }),
  );
}
