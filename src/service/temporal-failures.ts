import { WorkflowFailedError, WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { ChargeStateRefusal } from '../domain/charge-rules.js';
import { chargeStateRefusals, incurableLedgerFaults, ledgerRefusals, type LedgerRefusalType } from '../domain/refusals.js';
import {
  ChargeStateConflictError,
  IdempotencyConflictError,
  NotFoundError,
  RefundNotAuthorizedError,
  ValidationError,
  type ChargeguardError,
} from '../domain/errors.js';
import { asUnavailable, grpcCodeOf, grpcStatus } from './unavailable.js';

/**
 * The ledger's refusals that end a workflow and reach a caller, as the service's typed errors. A
 * refusal missing here reaches callers as "unavailable", which invites retries of a decision.
 */
const errorForRefusal: Partial<Record<LedgerRefusalType, (failure: ApplicationFailure) => ChargeguardError>> = {
  [ledgerRefusals.idempotencyConflict.type]: (failure) => new IdempotencyConflictError(failure.message),
  [ledgerRefusals.chargeNotFound.type]: (failure) => new NotFoundError(failure.message),
  [ledgerRefusals.chargeNotCaptured.type]: (failure) => new ChargeStateConflictError(failure.type!, failure.message),
  [ledgerRefusals.refundNotAuthorized.type]: (failure) => new RefundNotAuthorizedError(failure.message),
};

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
      const known = refusal?.type ? errorForRefusal[refusal.type as LedgerRefusalType] : undefined;
      if (refusal && known) throw known(refusal);
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
