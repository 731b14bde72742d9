import { CancellationScope, allHandlersFinished, condition } from '@temporalio/workflow';
import type { Charge } from '../src/domain/charge.js';
import { isOpen } from '../src/domain/charge-rules.js';
import { cancelReasons } from '../src/domain/refusals.js';
import { compensate } from './charge-compensation.js';
import { indexStatusChange } from './charge-indexing.js';
import type { ChargeRun } from './charge-run.js';
import { beginCharge } from './charge-start.js';
import { authorize, capture, reserve } from './charge-steps.js';
import type { ChargeWorkflowInput } from './definitions.js';
import { awaitCapture } from './manual-capture.js';
import { awaitPayerAction } from './payer-action.js';

/**
 * One charge, one execution per idempotency key: Try reserves the money, Confirm captures it,
 * Cancel releases it when the charge cannot or should not complete. The ledger makes every step
 * idempotent; this workflow decides which steps to run. Its result is the charge as the ledger
 * recorded it, identical for every caller of the key.
 *
 * A provider charge (docs/providers.md) has a second participant: after the ledger's hold, the
 * provider authorizes (and the payer may have to act); Confirm captures at the provider first.
 * A step that fails runs the charge's compensations (charge-compensation.ts), never given up.
 */
export async function ChargeWorkflow(input: ChargeWorkflowInput): Promise<Charge> {
  const run = beginCharge(input);

  run.charge = await reserve(run);
  indexStatusChange(run);

  if (run.provider && run.charge.status === 'reserved') await holdAtProvider(run);
  if (run.charge.status === 'reserved') run.charge = await settle(run);

  if (isOpen(run.charge)) throw new Error(`charge ${run.intent.idempotencyKey} would end while ${run.charge.status}; this is a bug`);
  indexStatusChange(run);
  await CancellationScope.nonCancellable(() => condition(allHandlersFinished));
  return run.charge;
}

/** Provider charges: the provider's hold after the ledger's, and the payer's action when it is needed. */
async function holdAtProvider(run: ChargeRun): Promise<void> {
  // An event may arrive while the provider is still answering the authorization: it counts.
  const eventsBeforeAuthorize = run.providerEventsReceived;
  run.charge = run.cancelRequested ? await compensate(run, cancelReasons.requestedByCaller) : await authorize(run);
  if (run.charge.status === 'requires_action') run.charge = await awaitPayerAction(run, eventsBeforeAuthorize);
}

/** A reserved charge ends captured or released: at once (automatic), or as asked before its hold expires (manual). */
async function settle(run: ChargeRun): Promise<Charge> {
  if (run.intent.request.captureMode === 'manual') return awaitCapture(run);
  if (run.cancelRequested) return compensate(run, cancelReasons.requestedByCaller);
  return capture(run, null);
}
