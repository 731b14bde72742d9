import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  TimeoutFailure,
  proxyActivities,
  proxyLocalActivities,
  sleep,
} from '@temporalio/workflow';
import { TimeoutType } from '@temporalio/common';
import type { LedgerActivities } from '../activities/index.js';
import type { ChargePolicy } from './definitions.js';
import type { ChargeShape } from './charge-generations.js';
import {
  incurableLedgerFaults,
  stepBudgetSpent,
  type IncurableLedgerFaultName,
  type LedgerRefusalType,
} from '../src/domain/refusals.js';

/** ChargePolicy.ledgerRetryMaxIntervalMs when the policy does not say (charges started before it existed). */
export const defaultLedgerRetryMaxIntervalMs = 10_000;

/** Backoff shared by every ledger step: quick first retries, capped so recovery is noticed fast. */
function retryBackoff(policy: ChargePolicy) {
  return { initialInterval: 200, backoffCoefficient: 2, maximumInterval: policy.ledgerRetryMaxIntervalMs ?? defaultLedgerRetryMaxIntervalMs };
}

/** Which budget ran out: the workflow compensates with the matching cancel reason. */
export type LedgerBudget = 'try' | 'confirm';

/** Thrown by a budgeted step whose budget ran out before the ledger answered. */
export class LedgerBudgetExhausted extends Error {
  override readonly name = 'LedgerBudgetExhausted';
  constructor(
    readonly budget: LedgerBudget,
    readonly budgetMs: number,
  ) {
    super(`${budget} kept failing for its whole budget of ${budgetMs} ms`);
  }
}

/**
 * Runs a step in a scope of its own and cancels it when its budget runs out. An outer cancellation
 * (a caller cancelling the workflow) reaches the step as before and is not mistaken for a budget.
 */
async function withinBudget<T>(budget: LedgerBudget, budgetMs: number, step: () => Promise<T>): Promise<T> {
  const stepScope = new CancellationScope();
  const timerScope = new CancellationScope();
  let exhausted = false;
  const timer = timerScope
    .run(() => sleep(budgetMs))
    .then(
      () => {
        exhausted = true;
        stepScope.cancel();
      },
      () => undefined, // cancelled: the step finished first, or the workflow is being cancelled
    );
  try {
    return await stepScope.run(step);
  } catch (error) {
    if (exhausted || isScheduleToCloseTimeout(error) || isBudgetSpent(error)) throw new LedgerBudgetExhausted(budget, budgetMs);
    throw error;
  } finally {
    timerScope.cancel();
    await timer;
  }
}

/** The local step gave itself up at its budget (activities/ledger-activities.ts): the same budget, spent. */
function isBudgetSpent(error: unknown): boolean {
  return stepFailure(error, true)?.type === stepBudgetSpent.type;
}

/** The activity's own schedule-to-close timeout, when it does fire: the same budget, spent. */
function isScheduleToCloseTimeout(error: unknown): boolean {
  return (
    error instanceof ActivityFailure &&
    error.cause instanceof TimeoutFailure &&
    error.cause.timeoutType === TimeoutType.SCHEDULE_TO_CLOSE
  );
}

/** ChargePolicy.compensationAlertAfterMs when the policy does not say. */
export const defaultCompensationAlertAfterMs = 30_000;

/** What the steps tell the workflow on the way, for its search attributes. */
export interface LedgerStepEvents {
  /** A compensation kept failing past its alert time (ChargePolicy.compensationAlertAfterMs); it goes on being retried. */
  compensationRetrying(): void;
}

/**
 * The ledger steps with the retry budget each deserves. Try and Confirm give up after their budget
 * and the workflow compensates. Cancel is the compensation: it has no budget and is retried until
 * it succeeds, because a hold that is never released is money wrongly withheld.
 *
 * Local or remote activities, and budget timers or deadlines, by generation: patches.ts says why
 * each changed. The shape (which patches the execution's history carries) was decided once at the workflow's
 * start (charge-generations.ts), so replay meets the patch checks at the same point of every history.
 */
export function ledgerSteps(policy: ChargePolicy, shape: ChargeShape, events: LedgerStepEvents) {
  const proxy = shape.localSteps ? proxyLocalActivities : proxyActivities;
  const retry = retryBackoff(policy);
  const tryStep = proxy<LedgerActivities>({
    startToCloseTimeout: policy.activityStartToCloseMs,
    scheduleToCloseTimeout: policy.tryBudgetMs,
    retry,
  });
  const confirmStep = proxy<LedgerActivities>({
    startToCloseTimeout: policy.activityStartToCloseMs,
    scheduleToCloseTimeout: policy.confirmBudgetMs,
    retry,
  });
  // No maximumAttempts and no schedule-to-close: Temporal retries these until they succeed.
  const untilDone = proxy<LedgerActivities>({
    startToCloseTimeout: policy.activityStartToCloseMs,
    retry,
  });
  let tryCharge: LedgerActivities['tryCharge'] = tryStep.tryCharge;
  let confirmCharge: LedgerActivities['confirmCharge'] = confirmStep.confirmCharge;
  let cancelCharge: LedgerActivities['cancelCharge'] = untilDone.cancelCharge;
  if (shape.stepDeadlines) {
    // Deadlines in workflow time (Date.now() here is the workflow task's, the same on replay): the
    // step gives itself up at its deadline, so no timer ever enters the history.
    tryCharge = (intent, holdTtlMs) =>
      withinDeadline('try', policy.tryBudgetMs, () => tryStep.tryCharge(intent, holdTtlMs, Date.now() + policy.tryBudgetMs));
    confirmCharge = (tenant, key, captureMinor) =>
      withinDeadline('confirm', policy.confirmBudgetMs, () =>
        confirmStep.confirmCharge(tenant, key, captureMinor, Date.now() + policy.confirmBudgetMs),
      );
    cancelCharge = async (intent, reason) => {
      try {
        return await untilDone.cancelCharge(intent, reason, Date.now() + (policy.compensationAlertAfterMs ?? defaultCompensationAlertAfterMs));
      } catch (error) {
        if (!isBudgetSpent(error)) throw error;
        events.compensationRetrying();
        return untilDone.cancelCharge(intent, reason);
      }
    };
  } else if (shape.budgetTimer) {
    tryCharge = (...args) => withinBudget('try', policy.tryBudgetMs, () => tryStep.tryCharge(...args));
    confirmCharge = (...args) => withinBudget('confirm', policy.confirmBudgetMs, () => confirmStep.confirmCharge(...args));
  }
  return {
    tryCharge,
    confirmCharge,
    cancelCharge,
    readCharge: untilDone.readCharge,
    ...stepFailureReader(shape.localFailuresUnwrapped),
  };
}

/** A step that enforces its own deadline: its giving up, or the SDK's timeout, is the budget spent. */
async function withinDeadline<T>(budget: LedgerBudget, budgetMs: number, step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    if (isScheduleToCloseTimeout(error) || isBudgetSpent(error)) throw new LedgerBudgetExhausted(budget, budgetMs);
    throw error;
  }
}

/** The budget that ran out, when a step failed for that reason. */
export function exhaustedBudget(error: unknown): LedgerBudget | null {
  if (error instanceof LedgerBudgetExhausted) return error.budget;
  return null;
}

/**
 * The business failure a step threw: inside an ActivityFailure for a remote activity, as thrown for
 * a local one (only recognised on the patched path, so histories recorded before it replay as they ran).
 */
function stepFailure(error: unknown, localFailuresUnwrapped: boolean): ApplicationFailure | null {
  if (error instanceof ActivityFailure && error.cause instanceof ApplicationFailure) return error.cause;
  if (localFailuresUnwrapped && error instanceof ApplicationFailure) return error;
  return null;
}

/** How the workflow reads a step's failure; which failures it recognises depends on the patch. */
export interface StepFailureReader {
  /** True when a step failed because the ledger refused it with this decision. */
  isRefusal(error: unknown, type: LedgerRefusalType): boolean;
  /** True when a step failed with an error retrying cannot cure (see incurableLedgerFaults). */
  isIncurable(error: unknown, fault: IncurableLedgerFaultName): boolean;
}

export function stepFailureReader(localFailuresUnwrapped: boolean): StepFailureReader {
  return {
    isRefusal: (error, type) => stepFailure(error, localFailuresUnwrapped)?.type === type,
    // Recognised on every path: no history recorded before these types existed can contain one, and
    // a workflow already spinning on such an error (started before this change) is then decided.
    isIncurable: (error, fault) => stepFailure(error, true)?.type === incurableLedgerFaults[fault].type,
  };
}
