import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { LedgerActivities } from '../activities/index.js';
import type { ChargePolicy } from './definitions.js';
import type { LedgerRefusalType } from '../src/domain/refusals.js';

/** Backoff shared by every ledger step: quick first retries, capped so recovery is noticed fast. */
const retryBackoff = { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' } as const;

/**
 * The ledger steps with the retry budget each deserves. Try and Confirm give up after their budget
 * and the workflow compensates. Cancel is the compensation: it has no budget and is retried until
 * it succeeds, because a hold that is never released is money wrongly withheld.
 */
export function ledgerSteps(policy: ChargePolicy) {
  const tryStep = proxyActivities<LedgerActivities>({
    startToCloseTimeout: policy.activityStartToCloseMs,
    scheduleToCloseTimeout: policy.tryBudgetMs,
    retry: retryBackoff,
  });
  const confirmStep = proxyActivities<LedgerActivities>({
    startToCloseTimeout: policy.activityStartToCloseMs,
    scheduleToCloseTimeout: policy.confirmBudgetMs,
    retry: retryBackoff,
  });
  // No maximumAttempts and no schedule-to-close: Temporal retries these until they succeed.
  const untilDone = proxyActivities<LedgerActivities>({
    startToCloseTimeout: policy.activityStartToCloseMs,
    retry: retryBackoff,
  });
  return {
    tryCharge: tryStep.tryCharge,
    confirmCharge: confirmStep.confirmCharge,
    cancelCharge: untilDone.cancelCharge,
    readCharge: untilDone.readCharge,
  };
}

/** True when a step failed because the ledger refused it with this decision. */
export function isLedgerRefusal(error: unknown, type: LedgerRefusalType): boolean {
  return (
    error instanceof ActivityFailure && error.cause instanceof ApplicationFailure && error.cause.type === type
  );
}
