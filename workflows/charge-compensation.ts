import { CancellationScope } from '@temporalio/workflow';
import type { Charge } from '../src/domain/charge.js';
import { cancelReasons } from '../src/domain/refusals.js';
import { indexActionNeeded } from './charge-indexing.js';
import type { ChargeRun } from './charge-run.js';
import { defaultProviderVoidAlertAfterMs, providerStepFailure } from './provider-steps.js';

/**
 * Undoes one participant's hold. `cancelled` is the charge as the compensations before it left it
 * (null for the first). Each is safe when its forward step never ran or never answered (the ledger's
 * Cancel writes a tombstone that stops a late Try; the void finds nothing sent and records just
 * that), and none gives up: each is retried until it succeeds.
 */
type Compensation = (run: ChargeRun, reason: string, cancelled: Charge | null) => Promise<Charge>;

/**
 * The charge's compensations, in the order they run: the ledger's Cancel (undoes Try's hold), then,
 * for a provider charge, the void (undoes the provider's authorization). Not the reverse of the
 * forward order (Try, then authorize) on purpose: the ledger's Cancel is the record that stops a
 * late authorize (which then voids what it got), so the void after it cannot miss an authorization
 * that lands later. Both run whichever forward steps ran, so a step that failed without answering
 * is undone too.
 */
function compensationsOf(run: ChargeRun): Compensation[] {
  return run.provider ? [cancelInLedger, voidAtProvider] : [cancelInLedger];
}

/**
 * Runs the charge's compensations. They, and the reads they rely on, run even when the workflow
 * itself is being cancelled (Web UI, `temporal workflow cancel`): a cancelled workflow must not
 * leave its hold behind.
 */
export async function compensate(run: ChargeRun, reason: string): Promise<Charge> {
  return CancellationScope.nonCancellable(async () => {
    try {
      let charge: Charge | null = null;
      for (const undo of compensationsOf(run)) charge = await undo(run, reason, charge);
      return charge!;
    } catch (error) {
      // Confirm did commit before its answer was lost: the money moved, so the charge succeeded.
      if (run.ledger.isRefusal(error, 'HoldAlreadyCaptured')) return readLedger(run);
      if (run.ledger.isIncurable(error, 'dataRejected')) return cancelledUnrecorded(run);
      throw error;
    }
  });
}

/** The ledger's Cancel: no budget, retried until it succeeds (ledger-steps.ts). */
async function cancelInLedger(run: ChargeRun, reason: string): Promise<Charge> {
  return (await run.ledger.cancelCharge(run.intent, reason)).charge;
}

/** The provider's void, after the ledger's Cancel answered `cancelled`: driven until the provider takes it. */
async function voidAtProvider(run: ChargeRun, _reason: string, cancelled: Charge | null): Promise<Charge> {
  const { tenant, idempotencyKey } = run.intent;
  const provider = run.provider!;
  const ledgerCancelled = cancelled!;
  if (!run.voidAlerts) return (await provider.void(tenant, idempotencyKey))?.charge ?? ledgerCancelled;
  run.cancelledInLedger = ledgerCancelled;
  try {
    const alertAfterMs = run.policy.providerVoidAlertAfterMs ?? defaultProviderVoidAlertAfterMs;
    return (await provider.voidUntilAlert(tenant, idempotencyKey, alertAfterMs))?.charge ?? ledgerCancelled;
  } catch (error) {
    if (providerStepFailure(error) !== 'budget') throw error;
    // Past its alert time: a person may have to look (ChargeStatus), waiting callers are
    // answered, and the void goes on until the provider takes it.
    run.voidRetrying = true;
    indexActionNeeded(run, 'cancelling');
    return (await provider.void(tenant, idempotencyKey))?.charge ?? ledgerCancelled;
  }
}

/**
 * Cancel could not even write its tombstone: the ledger rejects this charge's own values (a NUL
 * in a text field, say). Retrying cannot change that, and giving up is safe: Cancel sends the
 * intent's values that every Try of this charge sends too, into the same columns of the same
 * row, so no Try of this charge can have committed or ever will. There is no hold to release, and
 * no late Try that a tombstone would have to stop. The read (tenant and key only) checks that
 * reasoning instead of trusting it: a held row here would be a bug in it, and the plain Error
 * then fails the workflow task, retried until the bug is fixed, rather than abandon a hold.
 * Only a rejected value ends here: a rejected statement (class 42) or a system fault on Cancel
 * is retried until Cancel succeeds.
 */
async function cancelledUnrecorded(run: ChargeRun): Promise<Charge> {
  const { tenant, idempotencyKey } = run.intent;
  let row: Awaited<ReturnType<ChargeRun['ledger']['readCharge']>>;
  try {
    row = await run.ledger.readCharge(tenant, idempotencyKey);
  } catch (error) {
    // The key itself is a value the ledger rejects: no row can be stored under it.
    if (!run.ledger.isIncurable(error, 'dataRejected')) throw error;
    row = null;
  }
  if (row?.holdState === 'TRIED') {
    throw new Error(`charge ${idempotencyKey} is held but Cancel's values are rejected by the ledger; this is a bug`);
  }
  if (row) return row.charge;
  // Nothing recorded: the workflow's result is the only record of this decision.
  return { ...run.charge, status: 'cancelled', failureReason: cancelReasons.ledgerRejectedData, updatedAt: new Date().toISOString() };
}

/** The charge as the ledger recorded it, after a step found it decided already. */
export async function readLedger(run: ChargeRun): Promise<Charge> {
  const { tenant, idempotencyKey } = run.intent;
  const row = await CancellationScope.nonCancellable(() => run.ledger.readCharge(tenant, idempotencyKey));
  // A plain Error fails the workflow task, not the charge: it retries until the bug is fixed.
  if (!row) throw new Error(`ledger has no row for charge ${idempotencyKey} after it answered`);
  return row.charge;
}
