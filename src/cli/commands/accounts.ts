import type { Command } from 'commander';
import { createAccountBodySchema, depositToWire } from '../../service/accounts-service.js';
import { assertAccountId, assertIdempotencyKey, parseOptionalAmount, parseWith } from '../../service/validation.js';
import { loadConfig } from '../../config.js';
import { isSystemAccountId } from '../../domain/providers.js';
import { accountToWire, type WireAccount } from '../../service/wire.js';
import { addOutputOption, addTenantOption, minorUnitsOption, openCliLedger, print, runCommand, tenantFrom } from './surface.js';

function describeAccount(account: WireAccount): string {
  return `${account.id}  ${account.currency}  posted ${account.posted}  pending ${account.pending}  available ${account.available}  (minor units)`;
}

export function registerAccountsCommand(program: Command): void {
  const accounts = program.command('accounts').description('open accounts, fund them, read balances');

  const create = accounts
    .command('create')
    .description('open an account; repeating the same create is harmless')
    .requiredOption('--id <account-id>', 'account id')
    .requiredOption('--currency <code>', 'ISO 4217 code, e.g. USD')
    .option('--allow-overdraft', 'let available go below zero');
  addTenantOption(create);
  addOutputOption(create);
  create.action((options: { tenant?: string; id: string; currency: string; allowOverdraft?: boolean; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      const body = { id: options.id, currency: options.currency, allow_overdraft: options.allowOverdraft ?? false };
      parseWith(createAccountBodySchema(), body);
      const cli = await openCliLedger();
      try {
        const { account, created } = await cli.accounts.createAccount(tenant, null, body);
        const wire = accountToWire(account);
        print(options, wire, `${created ? 'created' : 'exists'}  ${describeAccount(wire)}`);
      } finally {
        await cli.close();
      }
    }),
  );

  const show = accounts
    .command('show')
    .description('an account and its balances; also a system account, e.g. @provider/stripe/USD (what the provider owes the tenant)')
    .argument('<account-id>');
  addTenantOption(show);
  addOutputOption(show);
  show.action((id: string, options: { tenant?: string; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      // The operator reads system accounts too, as admin keys do (src/domain/permissions.ts).
      const system = isSystemAccountId(id);
      if (!system) assertAccountId(id, '<account-id>');
      const cli = await openCliLedger();
      try {
        const wire = accountToWire(await cli.accounts.getAccount(tenant, id, '<account-id>', { includeSystem: system }));
        print(options, wire, describeAccount(wire));
      } finally {
        await cli.close();
      }
    }),
  );

  const deposit = accounts
    .command('deposit')
    .description('deposit into an account exactly once per --reference')
    .argument('<account-id>')
    .requiredOption('--amount <minor-units>', 'integer amount in minor units (cents)')
    .requiredOption('--reference <key>', 'idempotency key of this deposit, reused on every retry');
  addTenantOption(deposit);
  addOutputOption(deposit);
  deposit.action((id: string, options: { tenant?: string; amount: string; reference: string; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      assertAccountId(id, '<account-id>');
      assertIdempotencyKey(options.reference, '--reference');
      const amount = minorUnitsOption(options.amount, '--amount');
      parseOptionalAmount(amount, '--amount', loadConfig().CHARGE_AMOUNT_MINOR_MAX);
      const cli = await openCliLedger();
      try {
        const made = await cli.accounts.deposit(tenant, id, options.reference, { amount });
        const wire = depositToWire(made.deposit);
        print(options, { deposit: wire, replayed: made.replayed }, `${wire.id}  ${wire.amount} ${wire.currency} minor units into ${wire.account_id}${made.replayed ? '  (replayed: nothing new was deposited)' : ''}`);
      } finally {
        await cli.close();
      }
    }),
  );
}
