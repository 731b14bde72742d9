import { patched } from '@temporalio/workflow';
import { assertAuthenticatedStart } from './authenticated-start.js';
import { assertGenuineStart } from './verify-start.js';
import {
  chargeGeneration6Patch,
  chargeSearchAttributesPatch,
  localLedgerStepsPatch,
  stepBudgetTimerPatch,
  verifiedStartPatch,
} from './patches.js';

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
