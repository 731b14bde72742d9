import { WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { ChargeStateRefusal } from '../domain/charge-rules.js';
import { chargeStateRefusals, incurableLedgerFaults, ledgerRefusals } from '../domain/refusals.js';
import { ChargeStateConflictError, IdempotencyConflictError, NotFoundError, ValidationError } from './errors.js';
import { asUnavailable, grpcCodeOf, grpcStatus } from './unavailable.js';

/**
 * Runs an operation and turns workflow and infrastructure failures into the service's typed errors,
 * so that no surface has to know what Temporal's failures look like.
 */
export async function translateFailures<T>(operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    if (error instanceof WorkflowFailedError) {
      const refusal = applicationFailureIn(error);
      if (refusal?.type === ledgerRefusals.idempotencyConflict.type) throw new IdempotencyConflictError(refusal.message);
      if (refusal?.type === ledgerRefusals.chargeNotFound.type) throw new NotFoundError(refusal.message);
      if (refusal?.type === ledgerRefusals.chargeNotCaptured.type) {
        throw new ChargeStateConflictError(refusal.type, refusal.message);
      }
      // Values the ledger cannot store (validation should have caught them first): the caller's
      // request is at fault, and retrying it can never succeed.
      if (refusal && refusal.type === incurableLedgerFaults.dataRejected.type) {
        throw new ValidationError([{ field: 'body', message: `the ledger rejected these values: ${refusal.message}` }]);
      }
    }
    throw asUnavailable(error);
  }
}

/** The business failure at the root of a workflow or activity failure chain, if any. */
export function applicationFailureIn(error: unknown): ApplicationFailure | null {
  for (let cause: unknown = error; cause instanceof Error; cause = cause.cause) {
    if (cause instanceof ApplicationFailure) return cause;
  }
  return null;
}

/** A charge-state rule's refusal, as the service answers it when no workflow is left to answer. */
export function stateConflict(refusal: ChargeStateRefusal): ChargeStateConflictError {
  const known = chargeStateRefusals[refusal.name];
  return new ChargeStateConflictError(known.type, `${refusal.detail}: ${known.hint}`);
}

/** The workflow's own refusal of an update (raised from the same rule), kept as it said it. */
export function stateConflictFrom(cause: unknown): ChargeStateConflictError | null {
  if (cause instanceof ApplicationFailure && cause.type) return new ChargeStateConflictError(cause.type, cause.message);
  return null;
}

/**
 * An update that reached the workflow just as it closed: the ledger has the answer. Temporal says so
 * with NOT_FOUND ("workflow execution already completed", "update aborted by closing workflow") for
 * an update not yet accepted, and with an AcceptedUpdateCompletedWorkflow failure for one accepted.
 */
export function isCompletedDuringUpdate(error: unknown): boolean {
  if (grpcCodeOf(error) === grpcStatus.NOT_FOUND) return true;
  return error instanceof WorkflowUpdateFailedError && applicationFailureIn(error.cause)?.type === 'AcceptedUpdateCompletedWorkflow';
}
