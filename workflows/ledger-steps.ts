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
 * Try's and Confirm's budgets are enforced by a workflow timer, not only by the activities'
 * schedule-to-close timeout. A local activity's schedule-to-close is a one-shot timer inside the
 * worker's SDK core (@temporalio/core-bridge 1.24.0, local_activities.rs): when it fires while the
 * activity is backing off between attempts, which is where a step failing in milliseconds spends
 * nearly all its time, the timeout finds no attempt in flight, is dropped as untracked and never
 * fires again, so the step retries for ever. It is also measured from when this worker received
 * the step, so a workflow evicted and replayed elsewhere starts its budget afresh. The timer is
 * durable and in workflow time: the budget holds across worker restarts, and a step that finishes
 * within the workflow task cancels its timer before the command is sent, so a healthy charge's
 * history does not grow. The timer is started on the server with the task's first heartbeat
 * (every 80% of the workflow task timeout), so a step is given up at most that much (8 s by
 * default) after its budget. Workflows started before this change keep the activity timeout alone.
 *
 * The same patch makes the workflow recognise a local activity's failures: they reach workflow
 * code as the ApplicationFailure the activity threw, not wrapped in an ActivityFailure as a
 * remote activity's are, so until now a ledger refusal from a local step (Cancel finding the
 * charge captured, Try finding the key used by another request) was taken for a system fault.
 *
 * Generation 6 (charge-generations.ts) retired the timer: its start command reached the history
 * only when the task was completed while the step was unresolved in the workflow, which replay
 * cannot know. The step's deadline is now an argument the activity enforces itself.
 */
export const stepBudgetTimerPatch = 'ledger-step-budgets-and-local-failures';

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
 * The shape (which patches the execution's history carries) was decided once at the workflow's
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
