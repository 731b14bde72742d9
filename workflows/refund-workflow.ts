import { ApplicationFailure, patched, proxyActivities, setHandler, workflowInfo } from '@temporalio/workflow';
import type { RefundActivities } from '../activities/index.js';
import { refundWorkflowId, type Refund } from '../src/domain/refund.js';
import { isUndecodablePayload } from '../src/domain/undecodable-payload.js';
import { undecodableInputType } from './authenticated-start.js';
import { refundStatusQuery, type RefundWorkflowInput } from './definitions.js';
import { forgedStartType } from './verify-start.js';
import { refundStartCheckedPatch } from './patches.js';

/**
 * One refund, one execution per (charge key, refund key). The ledger function decides everything
 * (how much is left to refund, whether the payee can pay it back, whether the acting key may) in
 * one transaction; this workflow only makes sure that transaction runs to an answer. A refund holds
 * no money while it waits, so there is nothing to compensate: system faults are retried without a
 * budget, and the caller's wait budget, not this workflow, decides how long anyone waits for it.
 */
export async function RefundWorkflow(input: RefundWorkflowInput): Promise<Refund> {
  assertRefundStart(workflowInfo().workflowId, input);
  const { intent, pending, policy } = input;
  setHandler(refundStatusQuery, () => pending);
  const { refundCharge } = proxyActivities<RefundActivities>({
    startToCloseTimeout: policy.activityStartToCloseMs,
    // No maximumAttempts and no schedule-to-close: Temporal retries until it succeeds.
    retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' },
  });
  return (await refundCharge(intent)).refund;
}

/**
 * The input was authenticated by the payload codec; an undecodable one, or one naming another
 * refund than this workflow's id, ends the execution at once and touches nothing. No history
 * recorded before this check can hold an undecodable input (the codec threw instead), so that part
 * needs no patch.
 */
function assertRefundStart(workflowId: string, input: unknown): asserts input is RefundWorkflowInput {
  if (isUndecodablePayload(input)) {
    throw ApplicationFailure.create({
      type: undecodableInputType,
      message: `the worker could not decode this refund's input (${input.undecodablePayload}); nothing was refunded`,
      nonRetryable: true,
    });
  }
  const intent = (input as Partial<RefundWorkflowInput> | null)?.intent;
  const named =
    intent && typeof intent.tenant === 'string' && typeof intent.chargeKey === 'string' && typeof intent.refundKey === 'string'
      ? refundWorkflowId(intent.tenant, intent.chargeKey, intent.refundKey)
      : null;
  if (named === workflowId || !patched(refundStartCheckedPatch)) return;
  throw ApplicationFailure.create({
    type: forgedStartType,
    message: `refused a refund start the service did not make: ${named === null ? 'the input is not a refund workflow input' : `workflow id ${JSON.stringify(workflowId)} is not ${JSON.stringify(named)}, the id of the input's refund`}`,
    nonRetryable: true,
  });
}
