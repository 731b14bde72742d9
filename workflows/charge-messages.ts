import { condition, setHandler } from '@temporalio/workflow';
import { isOpen } from '../src/domain/charge-rules.js';
import { assertCancellable, assertCapturable } from './charge-state.js';
import type { ChargeRun } from './charge-run.js';
import { cancelChargeUpdate, captureChargeUpdate, chargeStatusQuery, providerEventSignal } from './definitions.js';

/**
 * What callers may ask of a charge while it runs: its status, a provider event (a reason to look
 * again), a cancel, a capture. The handlers only record what was asked and answer once the
 * workflow has acted on it; the workflow's steps decide.
 */
export function handleChargeMessages(run: ChargeRun): void {
  setHandler(chargeStatusQuery, () => run.charge);
  setHandler(providerEventSignal, () => {
    run.providerEventsReceived += 1;
  });

  setHandler(
    cancelChargeUpdate,
    async () => {
      run.cancelRequested = true;
      await condition(() => !isOpen(run.charge) || run.voidRetrying);
      // The ledger cancelled and the provider's hold is still being voided: say so now (cancelling),
      // rather than keep the caller waiting on a void that may take an operator.
      if (isOpen(run.charge) && run.cancelledInLedger) return run.cancelledInLedger;
      if (run.charge.status === 'cancelled') return run.charge;
      assertCancellable(run.charge); // lost the race to Confirm or Try's decline: say so
      return run.charge;
    },
    { validator: () => assertCancellable(run.charge) },
  );

  setHandler(
    captureChargeUpdate,
    async ({ amountMinor }) => {
      // The first capture asked for decides the amount; `??=` would let a later one overwrite a
      // null (capture everything) before the workflow acted on it.
      if (run.captureMinor === undefined) run.captureMinor = amountMinor;
      await condition(() => !isOpen(run.charge) || run.voidRetrying);
      const settled = isOpen(run.charge) && run.cancelledInLedger ? run.cancelledInLedger : run.charge;
      assertCapturable(settled, amountMinor);
      return settled;
    },
    { validator: ({ amountMinor }) => assertCapturable(run.charge, amountMinor) },
  );
}
