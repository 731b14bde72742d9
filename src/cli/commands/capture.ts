import type { Command } from 'commander';
import { addIdentityOptions, assertIdentityNamed, resolvePrincipal } from '../identity.js';
import { assertIdempotencyKey, parseOptionalAmount } from '../../service/validation.js';
import { chargeToWire } from '../../service/wire.js';
import { loadConfig } from '../../config.js';
import { addOutputOption, describeCharge, minorUnitsOption, openCliContext, print, runCommand } from './surface.js';

export function registerCaptureCommand(program: Command): void {
  const command = program
    .command('capture')
    .description('capture a manual-capture charge, all of it or --amount of it; repeating it is harmless')
    .argument('<idempotency-key>', 'the key the charge was created with')
    .option('--amount <minor-units>', 'capture less than reserved; the rest is released');
  addIdentityOptions(command);
  addOutputOption(command);
  command.action((key: string, options: { tenant?: string; apiKeyFile?: string; amount?: string; json?: boolean }) =>
    runCommand(options, async () => {
      assertIdentityNamed(options);
      assertIdempotencyKey(key, '<idempotency-key>');
      const amount = parseOptionalAmount(minorUnitsOption(options.amount, '--amount'), '--amount', loadConfig().CHARGE_AMOUNT_MINOR_MAX);
      const context = await openCliContext();
      try {
        const principal = await resolvePrincipal(context.keys, options, 'charges.capture');
        const tenant = principal.tenant;
        const charge = chargeToWire(await context.charges.captureCharge(tenant, key, amount));
        print(options, charge, describeCharge(charge));
      } finally {
        await context.close();
      }
    }),
  );
}
