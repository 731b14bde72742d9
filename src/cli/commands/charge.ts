import type { Command } from 'commander';
import { chargeActorOf } from '../../auth/principal.js';
import { addIdentityOptions, assertIdentityNamed, resolvePrincipal } from '../identity.js';
import { assertIdempotencyKey, parseChargeRequest } from '../../service/validation.js';
import { chargeToWire } from '../../service/wire.js';
import { ValidationError, type FieldError } from '../../domain/errors.js';
import { defaultProviderName } from '../../service/validation.js';
import { providerNames } from '../../domain/providers.js';
import { loadConfig } from '../../config.js';
import {
  addOutputOption,
  describeCharge,
  millisecondsOption,
  minorUnitsOption,
  openCliContext,
  print,
  runCommand,
} from './surface.js';

interface ChargeOptions {
  tenant?: string;
  apiKeyFile?: string;
  key: string;
  order: string;
  payer?: string;
  paymentMethod?: string;
  provider?: string;
  returnUrl?: string;
  payee: string;
  amount: string;
  currency: string;
  manual?: boolean;
  description?: string;
  waitMs?: string;
  json?: boolean;
}

/**
 * Who pays, named as the flags name it. Checked here rather than with commander's `conflicts`, whose
 * refusal leaves by commander's own exit path (exit 1, no --json), so that this refusal is printed
 * and exits as every other invalid flag does. The service judges the same rule on the body.
 */
export function assertOnePayer(options: Pick<ChargeOptions, 'payer' | 'paymentMethod' | 'provider' | 'returnUrl'>): void {
  const errors: FieldError[] = [];
  if (options.payer !== undefined && options.paymentMethod !== undefined) {
    const both = 'a charge names one payer: --payer (a ledger account) or --payment-method (through a provider), not both';
    errors.push({ field: '--payer', message: both }, { field: '--payment-method', message: both });
  } else if (options.payer === undefined && options.paymentMethod === undefined) {
    const neither = 'is required: a charge names --payer (a ledger account) or --payment-method (through a provider)';
    errors.push({ field: '--payer', message: neither }, { field: '--payment-method', message: neither });
  }
  if (options.provider !== undefined && options.paymentMethod === undefined) {
    errors.push({ field: '--provider', message: 'is allowed only with --payment-method: it names the provider of that payment method' });
  }
  if (options.returnUrl !== undefined && options.paymentMethod === undefined) {
    errors.push({ field: '--return-url', message: 'is allowed only with --payment-method: the payer comes back there from the provider' });
  }
  if (errors.length > 0) throw new ValidationError(errors);
}

export function registerChargeCommand(program: Command): void {
  const command = program
    .command('charge')
    .description('charge an order exactly once: rerun with the same --key after any failure and it will not charge twice')
    .requiredOption('--key <idempotency-key>', 'idempotency key, reused verbatim on every retry')
    .requiredOption('--order <id>', 'order id')
    .option('--payer <account>', 'account to debit (or --payment-method, not both)')
    .option('--payment-method <id>', "the payer's instrument at a payment provider, e.g. pm_card_visa (or --payer, not both)")
    .option('--provider <name>', `the provider of --payment-method (default ${defaultProviderName}; one of ${providerNames.join(', ')})`)
    .requiredOption('--payee <account>', 'account to credit')
    .requiredOption('--amount <minor-units>', 'integer amount in minor units (cents)')
    .requiredOption('--currency <code>', 'ISO 4217 code, e.g. USD')
    .option('--manual', 'only reserve the money; `capture` moves it')
    .option('--return-url <url>', 'with --payment-method: the https page the payer returns to after authenticating (3-D Secure)')
    .option('--description <text>', 'free text kept with the charge')
    .option('--wait-ms <ms>', 'how long to wait for the outcome before reporting "still processing"');
  addIdentityOptions(command);
  addOutputOption(command);
  command.action((options: ChargeOptions) =>
    runCommand(options, async () => {
      assertIdentityNamed(options);
      assertOnePayer(options);
      const body = {
        order_id: options.order,
        ...(options.payer !== undefined ? { payer_account_id: options.payer } : {}),
        ...(options.paymentMethod !== undefined ? { payment_method: options.paymentMethod } : {}),
        ...(options.provider !== undefined ? { provider: options.provider } : {}),
        ...(options.returnUrl !== undefined ? { return_url: options.returnUrl } : {}),
        payee_account_id: options.payee,
        amount: minorUnitsOption(options.amount, 'amount'),
        currency: options.currency,
        capture: options.manual ? 'manual' : 'automatic',
        ...(options.description !== undefined ? { description: options.description } : {}),
      };
      // Judged before connecting, by the rules every surface uses: a bad flag starts nothing.
      assertIdempotencyKey(options.key, '--key');
      parseChargeRequest(body, loadConfig().CHARGE_AMOUNT_MINOR_MAX);
      const waitMs = millisecondsOption(options.waitMs, '--wait-ms');
      const context = await openCliContext();
      try {
        const principal = await resolvePrincipal(context.keys, options, 'charges.create');
        const tenant = principal.tenant;
        const actor = chargeActorOf(principal);
        const answer = await context.charges.charge(tenant, options.key, body, { ...(waitMs === undefined ? {} : { waitMs }), ...(actor ? { actor } : {}) });
        const charge = chargeToWire(answer.charge);
        const note =
          charge.status === 'requires_action'
            ? '  (waiting for the payer: hand next_action to them, then `status` or rerun with the same --key)'
            : !answer.completed
              ? '  (still processing: rerun with the same --key)'
              : answer.replayed
                ? '  (replayed: nothing new was charged)'
                : '';
        print(options, { charge, replayed: answer.replayed, completed: answer.completed }, `${describeCharge(charge)}${note}`);
      } finally {
        await context.close();
      }
    }),
  );
}
