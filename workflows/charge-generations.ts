import { patched } from '@temporalio/workflow';
import { localLedgerStepsPatch, stepBudgetTimerPatch } from './ledger-steps.js';
import { chargeSearchAttributesPatch } from './search-attributes.js';
import { assertAuthenticatedStart } from './authenticated-start.js';
import { assertGenuineStart, verifiedStartPatch } from './verify-start.js';

/**
 * Generation 6 of ChargeWorkflow, one patch for everything it changed at once (one marker and one
 * TemporalChangeVersion upsert per charge, where calling the four older patches cost four of each):
 *
 * - Try's and Confirm's budgets are deadlines the step itself enforces (an argument in workflow
 *   time), not a workflow timer. The timer made a charge's history depend on wall-clock timing: its
 *   start command reached the history only when the workflow task was completed while the step was
 *   still unresolved in the workflow (a heartbeat, or a task completed early to answer a query),
 *   and on replay the SDK resolves a local activity whose marker sits in the same task at once, so
 *   the timer was cancelled before its command existed and the replay diverged
 *   (docs/deploying-workflow-changes.md, "The budget timer that would not replay").
 * - The input is trusted because the payload codec authenticated it (AES-256-GCM, the service's
 *   key); the workflow checks only that it names this workflow's own id, and ends at once when the
 *   codec could not decode it. The in-sandbox SHA-256 re-derivation of generation 5 is retired: a
 *   hash anyone can compute told a forgery from the service in no case.
 * - ChargeStatus is indexed only while a person may have to act: a manual hold waiting for its
 *   capture, and a compensation that keeps failing. Closed charges are read from the ledger.
 *
 * Executions started before (no marker of this patch in their history) replay the older patches
 * in the order they called them, so every recorded generation replays as it ran.
 */
export const chargeGeneration6Patch = 'charge-generation-6';

/** How ChargeStatus follows the charge, by generation. */
export type StatusIndexing = 'none' | 'every-change' | 'when-action-needed';

/** What one execution does, decided once at its start from the patches in its history. */
export interface ChargeShape {
  /** Ledger steps run as local activities (generation 2 on). */
  localSteps: boolean;
  /** Try's and Confirm's budgets are a workflow timer (generations 3 to 5). */
  budgetTimer: boolean;
  /** Try's and Confirm's budgets are deadlines passed to the step (generation 6 on). */
  stepDeadlines: boolean;
  /** A local step's business failure arrives unwrapped and is recognised as such (generation 3 on). */
  localFailuresUnwrapped: boolean;
  statusIndexing: StatusIndexing;
}

const generation6: ChargeShape = {
  localSteps: true,
  budgetTimer: false,
  stepDeadlines: true,
  localFailuresUnwrapped: true,
  statusIndexing: 'when-action-needed',
};

/**
 * Decides the execution's shape and refuses a start the service did not make, before the input is
 * read. Called first thing, so every history meets these patch checks at the same point.
 */
export function chargeShapeOf(workflowId: string, input: unknown): ChargeShape {
  if (patched(chargeGeneration6Patch)) {
    assertAuthenticatedStart(workflowId, input);
    return generation6;
  }
  // The older generations, in the order their code called the patches.
  if (patched(verifiedStartPatch)) assertGenuineStart(workflowId, input);
  const localSteps = patched(localLedgerStepsPatch);
  const budgetTimer = patched(stepBudgetTimerPatch);
  const indexesStatus = patched(chargeSearchAttributesPatch);
  return {
    localSteps,
    budgetTimer,
    stepDeadlines: false,
    localFailuresUnwrapped: budgetTimer,
    statusIndexing: indexesStatus ? 'every-change' : 'none',
  };
}
