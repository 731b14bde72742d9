import type { Command } from 'commander';
import { assertIdempotencyKey } from '../../service/validation.js';
import { chargeToWire } from '../../service/wire.js';
import { addOutputOption, addTenantOption, describeCharge, openCliContext, print, runCommand, tenantFrom } from './surface.js';

export function registerCancelCommand(program: Command): void {
  const command = program
    .command('cancel')
    .description('cancel a charge that has not succeeded (releases its hold); repeating it is harmless')
    .argument('<idempotency-key>', 'the key the charge was created with');
  addTenantOption(command);
  addOutputOption(command);
  command.action((key: string, options: { tenant?: string; json?: boolean }) =>
    runCommand(options, async () => {
      const tenant = tenantFrom(options);
      assertIdempotencyKey(key, '<idempotency-key>');
      const context = await openCliContext();
      try {
        const charge = chargeToWire(await context.charges.cancelCharge(tenant, key));
        print(options, charge, describeCharge(charge));
      } finally {
        await context.close();
      }
    }),
  );
}
