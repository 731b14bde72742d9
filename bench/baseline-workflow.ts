import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { BaselineActivities } from './baseline-activities.js';

export const baselineWorkflowType = 'BaselineChargeShapeWorkflow';

export interface BaselineInput {
  /** About the size of a charge intent, so both workflows move the same bytes through the server. */
  payload: Record<string, unknown>;
  /** Run the three steps as local activities, mirroring how the charge workflow runs its ledger steps. */
  localActivities: boolean;
}

const options = {
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' },
} as const;

/**
 * P1's baseline: a workflow of the charge's shape (three activities in sequence, each answering a
 * record) that does no work at all. The gap between it and ChargeWorkflow on the same server and
 * worker settings is what chargeguard itself costs. Bench-only: registered on its own task queue,
 * never in workflows/index.ts.
 */
export async function BaselineChargeShapeWorkflow(input: BaselineInput): Promise<Record<string, unknown>> {
  const steps = input.localActivities
    ? proxyLocalActivities<BaselineActivities>(options)
    : proxyActivities<BaselineActivities>(options);
  const reserved = await steps.noopReserve(input.payload);
  const captured = await steps.noopCapture(reserved);
  return steps.noopRecord(captured);
}

export const emptyWorkflowType = 'BaselineEmptyWorkflow';

/** The cheapest workflow there is: one workflow task that completes it. The floor under P5. */
export async function BaselineEmptyWorkflow(input: BaselineInput): Promise<Record<string, unknown>> {
  return input.payload;
}
