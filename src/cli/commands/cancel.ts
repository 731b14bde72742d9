import type { Command } from 'commander';
import { addIdentityOptions, assertIdentityNamed, resolvePrincipal } from '../identity.js';
import { assertIdempotencyKey } from '../../service/validation.js';
import { chargeToWire } from '../../service/wire.js';
import { addOutputOption, describeCharge, openCliContext, print, runCommand } from './surface.js';

export function registerCancelCommand(program: Command): void {
  const command = program
    .command('cancel')
    .description('cancel a charge that has not succeeded (releases its hold); repeating it is harmless')
    .argument('<idempotency-key>', 'the key the charge was created with');
  addIdentityOptions(command);
  addOutputOption(command);
  command.action((key: string, options: { tenant?: string; apiKeyFile?: string; json?: boolean }) =>
    runCommand(options, async () => {
      assertIdentityNamed(options);
      assertIdempotencyKey(key, '<idempotency-key>');
      const context = await openCliContext();
      try {
        const principal = await resolvePrincipal(context.keys, options, 'charges.cancel');
        const tenant = principal.tenant;
        const charge = chargeToWire(await context.charges.cancelCharge(tenant, key));
        print(options, charge, describeCharge(charge));
      } finally {
        await context.close();
      }
    }),
  );
}
