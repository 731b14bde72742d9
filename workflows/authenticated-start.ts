import { ApplicationFailure } from '@temporalio/workflow';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { isUndecodablePayload } from '../src/domain/undecodable-payload.js';
import type { ChargeWorkflowInput } from './definitions.js';
import { forgedStartType, shapeProblem } from './verify-start.js';

/** The failure type of a start whose input the worker's codec could not decode: final. */
export const undecodableInputType = 'UndecodableInput';

/**
 * Generation 6's start check. The payload codec authenticates every input (AES-256-GCM under the
 * service's key), so what reaches here was written by a holder of that key, or is the codec's
 * stand-in for an input it could not decode. What is left to check costs no hash:
 * - an undecodable input ends the execution at once (UndecodableInput), touching nothing;
 * - the input must be shaped like the service's, and name this very workflow id, so an input
 *   captured from one charge cannot be replayed under another id or tenant (ForgedStart).
 * The ledger still decides every movement from its own tables (docs/back-door.md), so even a
 * deployment that accepts plaintext lets a forger do no more than a key could through the API.
 */
export function assertAuthenticatedStart(workflowId: string, input: unknown): asserts input is ChargeWorkflowInput {
  if (isUndecodablePayload(input)) {
    throw ApplicationFailure.create({
      type: undecodableInputType,
      message: `the worker could not decode this charge's input (${input.undecodablePayload}); nothing was charged`,
      nonRetryable: true,
    });
  }
  const shape = shapeProblem(input);
  const { intent } = input as ChargeWorkflowInput;
  const problem =
    shape ??
    (chargeWorkflowId(intent.tenant, intent.idempotencyKey) === workflowId
      ? null
      : `workflow id ${JSON.stringify(workflowId)} is not ${JSON.stringify(chargeWorkflowId(intent.tenant, intent.idempotencyKey))}, the id of the input's tenant and key`);
  if (problem === null) return;
  throw ApplicationFailure.create({
    type: forgedStartType,
    message: `refused a charge start the service did not make: ${problem}`,
    nonRetryable: true,
    details: [problem],
  });
}
