import { proxyActivities, setHandler } from '@temporalio/workflow';
import type { RefundActivities } from '../activities/index.js';
import type { Refund } from '../src/domain/refund.js';
import { refundStatusQuery, type RefundWorkflowInput } from './definitions.js';

/**
 * One refund, one execution per (charge key, refund key). The ledger function decides everything
 * (how much is left to refund, whether the payee can pay it back) in one transaction; this workflow
 * only makes sure that transaction runs to an answer. A refund holds no money while it waits, so
 * there is nothing to compensate: system faults are retried without a budget, and the caller's
 * wait budget, not this workflow, decides how long anyone waits for it.
 */
export async function RefundWorkflow({ intent, pending, policy }: RefundWorkflowInput): Promise<Refund> {
  setHandler(refundStatusQuery, () => pending);
  const { refundCharge } = proxyActivities<RefundActivities>({
    startToCloseTimeout: policy.activityStartToCloseMs,
    // No maximumAttempts and no schedule-to-close: Temporal retries until it succeeds.
    retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' },
  });
  return (await refundCharge(intent)).refund;
}
