import { upsertSearchAttributes } from '@temporalio/workflow';
import type { ChargeRun } from './charge-run.js';
import { actionNeededSearchAttributes, chargeSearchAttributePairs, type IndexedChargeStatus } from './search-attributes.js';

/**
 * Generations 4 and 5: ChargeStatus follows every change of the charge. Refunds happen after the
 * charge closed, so a refunded charge still says succeeded there: the ledger is the source of
 * truth for those.
 */
export function indexStatusChange(run: ChargeRun): void {
  if (run.shape.statusIndexing !== 'every-change' || run.charge.status === run.indexedStatus) return;
  upsertSearchAttributes(chargeSearchAttributePairs(run.charge, run.charge.status));
  run.indexedStatus = run.charge.status;
}

/**
 * Generation 6: ChargeStatus is written only where a person may have to act, and stays as
 * written once the execution closes (searches pair it with ExecutionStatus = 'Running').
 */
export function indexActionNeeded(run: ChargeRun, status: IndexedChargeStatus): void {
  if (run.shape.statusIndexing !== 'when-action-needed' || status === run.indexedStatus) return;
  upsertSearchAttributes(actionNeededSearchAttributes(run.charge, status));
  run.indexedStatus = status;
}
