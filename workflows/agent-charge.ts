import {
  ApplicationFailure,
  ParentClosePolicy,
  proxyActivities,
  sleep,
  startChild,
} from '@temporalio/workflow';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { LedgerActivities } from '../activities/index.js';
import { chargeWorkflowId, decidedStatuses, type Charge, type ChargeIntent } from '../src/domain/charge.js';
import { ledgerRefusals } from '../src/domain/refusals.js';
import type { ChargeWorkflow } from './charge-workflow.js';
import { chargeTaskQueue, chargeWorkflowType, type ChargeMemo, type ChargePolicy } from './definitions.js';

export interface ChargeFromWorkflowOptions {
  /** Where ChargeWorkflow workers listen; the agent itself may run anywhere. */
  taskQueue?: string;
}

/** Waiting for a charge started by an earlier run of the agent: quick at first, then patient. */
const firstPollMs = 250;
/** Capped so a manual-capture charge waiting days for its capture adds few events to the history. */
const maxPollMs = 5 * 60 * 1000;

/**
 * For agents that are themselves workflows: charge under the caller's idempotency key, exactly once,
 * however often this line runs. Use it instead of an activity that calls the API.
 *
 * The charge runs as a child ChargeWorkflow with the usual id `charge/<tenant>/<key>`, so Temporal
 * refuses a second start of it. That happens when the agent is reset, retried, or continued from an
 * older point of its history: the earlier run's child already exists (and was left running by
 * ABANDON, so killing the agent never kills a charge halfway). The new run then cannot receive that
 * child's result, so it reads the outcome from the ledger, which settles every charge it started.
 *
 * `intent` comes from ChargeService.buildIntent (fingerprinting needs Node's crypto, which workflow
 * code has not): typically the agent is started with the intents it may charge.
 */
export async function chargeFromWorkflow(
  intent: ChargeIntent,
  policy: ChargePolicy,
  options: ChargeFromWorkflowOptions = {},
): Promise<Charge> {
  const taskQueue = options.taskQueue ?? chargeTaskQueue;
  const memo: ChargeMemo = { fingerprint: intent.fingerprint };
  try {
    const child = await startChild<typeof ChargeWorkflow>(chargeWorkflowType, {
      workflowId: chargeWorkflowId(intent.tenant, intent.idempotencyKey),
      taskQueue,
      args: [{ intent, policy }],
      memo: { ...memo },
      // The child workflow's defaults are the opposite of what a charge needs.
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
      parentClosePolicy: ParentClosePolicy.ABANDON,
    });
    return await child.result();
  } catch (error) {
    if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
  }
  return awaitLedgerOutcome(intent, policy, taskQueue);
}

/** Polls the ledger (durable timers between polls) until the charge under this key is decided. */
async function awaitLedgerOutcome(intent: ChargeIntent, policy: ChargePolicy, taskQueue: string): Promise<Charge> {
  const { readCharge } = proxyActivities<LedgerActivities>({
    taskQueue,
    startToCloseTimeout: policy.activityStartToCloseMs,
    // No maximumAttempts and no schedule-to-close: Temporal retries until it succeeds.
    retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' },
  });
  for (let waitMs = firstPollMs; ; waitMs = Math.min(waitMs * 2, maxPollMs)) {
    const row = await readCharge(intent.tenant, intent.idempotencyKey);
    if (row && row.fingerprint !== intent.fingerprint) {
      // The key belongs to another request: the same refusal a charge start under it gets.
      throw ApplicationFailure.create({
        type: ledgerRefusals.idempotencyConflict.type,
        message: `idempotency key ${intent.idempotencyKey} was first used for a different charge request`,
        nonRetryable: true,
      });
    }
    // No row yet: the earlier run's child has not reached Try; TRIED: it waits for a capture.
    if (row && decidedStatuses.has(row.charge.status)) return row.charge;
    await sleep(waitMs);
  }
}
