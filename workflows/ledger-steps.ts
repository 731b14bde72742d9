import { ActivityFailure, ApplicationFailure, patched, proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { LedgerActivities } from '../activities/index.js';
import type { ChargePolicy } from './definitions.js';
import type { LedgerRefusalType } from '../src/domain/refusals.js';

/** Backoff shared by every ledger step: quick first retries, capped so recovery is noticed fast. */
const retryBackoff = { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' } as const;

/**
 * Ledger steps run as local activities: in the worker that runs the workflow task, inside that
 * task, their results recorded as markers. A charge then costs one workflow task instead of three
 * tasks and two activity round trips through the server (each a write to its persistence). What
 * makes the trade acceptable here:
 * - every step is one idempotent ledger transaction of a few milliseconds, far below the
 *   workflow task timeout, so a step never needs to outlive its task;
 * - a local activity is at-least-once per workflow task attempt (a worker that dies mid-task
 *   makes the next worker run the step again), which the ledger's truth table already absorbs;
 * - retries keep their budgets and backoff; beyond the local retry threshold the backoff becomes
 *   a durable timer, so Cancel's retry-until-done survives worker restarts as before;
 * - what is lost: activity-level visibility and routing (no ActivityTaskScheduled events; the
 *   steps cannot run on a separate activity fleet). The ledger is the record of money anyway.
 * Workflows started before this change (no patch marker in their history) keep remote activities.
 */
export const localLedgerStepsPatch = 'ledger-steps-as-local-activities';

/**
 * The ledger steps with the retry budget each deserves. Try and Confirm give up after their budget
 * and the workflow compensates. Cancel is the compensation: it has no budget and is retried until
 * it succeeds, because a hold that is never released is money wrongly withheld.
 */
export function ledgerSteps(policy: ChargePolicy) {
  const proxy = patched(localLedgerStepsPatch) ? proxyLocalActivities : proxyActivities;
  const tryStep = proxy<LedgerActivities>({
    startToCloseTimeout: policy.activityStartToCloseMs,
    scheduleToCloseTimeout: policy.tryBudgetMs,
    retry: retryBackoff,
  });
  const confirmStep = proxy<LedgerActivities>({
    startToCloseTimeout: policy.activityStartToCloseMs,
    scheduleToCloseTimeout: policy.confirmBudgetMs,
    retry: retryBackoff,
  });
  // No maximumAttempts and no schedule-to-close: Temporal retries these until they succeed.
  const untilDone = proxy<LedgerActivities>({
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
