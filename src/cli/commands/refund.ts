import type { Command } from 'commander';
import { chargeActorOf } from '../../auth/principal.js';
import { addIdentityOptions, assertIdentityNamed, resolvePrincipal } from '../identity.js';
import { assertIdempotencyKey, parseOptionalAmount } from '../../service/validation.js';
import { refundToWire } from '../../service/wire.js';
import { loadConfig } from '../../config.js';
import { addOutputOption, minorUnitsOption, openCliContext, print, runCommand } from './surface.js';

export function registerRefundCommand(program: Command): void {
  const command = program
    .command('refund')
    .description('refund a succeeded charge exactly once per --refund-key: all that is left, or --amount')
    .argument('<idempotency-key>', 'the key the charge was created with')
    .requiredOption('--refund-key <key>', "the refund's own idempotency key, reused on every retry")
    .option('--amount <minor-units>', 'refund this much; all that is left when omitted');
  addIdentityOptions(command);
  addOutputOption(command);
  command.action((key: string, options: { tenant?: string; apiKeyFile?: string; refundKey: string; amount?: string; json?: boolean }) =>
    runCommand(options, async () => {
      assertIdentityNamed(options);
      assertIdempotencyKey(key, '<idempotency-key>');
      assertIdempotencyKey(options.refundKey, '--refund-key');
      const amount = minorUnitsOption(options.amount, '--amount');
      parseOptionalAmount(amount, '--amount', loadConfig().CHARGE_AMOUNT_MINOR_MAX);
      const context = await openCliContext();
      try {
        const principal = await resolvePrincipal(context.keys, options, 'refunds.create');
        const tenant = principal.tenant;
        const actor = chargeActorOf(principal);
        const answer = await context.charges.refund(tenant, key, options.refundKey, amount === undefined ? {} : { amount }, actor ? { actor } : {});
        const refund = refundToWire(answer.refund);
        const note = !answer.completed ? '  (still processing: rerun with the same --refund-key)' : answer.replayed ? '  (replayed)' : '';
        print(
          options,
          { refund, replayed: answer.replayed, completed: answer.completed },
          `${refund.id}  ${refund.status}  ${refund.amount ?? 'the rest'} ${refund.currency} minor units  of charge ${refund.charge_id}${note}`,
        );
      } finally {
        await context.close();
      }
    }),
  );
}
