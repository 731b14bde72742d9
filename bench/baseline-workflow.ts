import { proxyActivities, proxyLocalActivities } from '@temporalio/workflow';
import type { BaselineActivities, ProviderBaselineActivities } from './baseline-activities.js';

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

export const providerBaselineWorkflowType = 'BaselineProviderShapeWorkflow';

export interface ProviderBaselineInput extends BaselineInput {
  /** What the two provider steps send: the same requests a provider charge sends. */
  payment: ProviderBaselinePayment;
}

/** The provider calls' parameters (the metadata the connector writes comes from `reference`). */
export interface ProviderBaselinePayment {
  reference: { tenant: string; chargeId: string };
  amountMinor: number;
  currency: string;
  paymentMethod: string;
}

/** As workflows/provider-steps.ts runs its steps: remote, retried with the same backoff. */
const providerStepOptions = {
  startToCloseTimeout: '90 seconds',
  retry: { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '30 seconds' },
} as const;

/**
 * P1-provider's baseline: a provider charge's shape with nothing of chargeguard in it. One no-op
 * step (local when the charge's ledger Try is local), then authorize and capture at the same
 * provider through the same connector, as remote activities. The provider's latency and the
 * simulator's CPU are then in both arms, so the ratio prices what chargeguard adds: the ledger
 * steps around each provider call, the service's checks, the charge workflow's own logic.
 */
export async function BaselineProviderShapeWorkflow(input: ProviderBaselineInput): Promise<Record<string, unknown>> {
  const first = input.localActivities
    ? proxyLocalActivities<BaselineActivities>(options)
    : proxyActivities<BaselineActivities>(options);
  const provider = proxyActivities<ProviderBaselineActivities>(providerStepOptions);
  await first.noopReserve(input.payload);
  const paymentId = await provider.bareAuthorize(input.payment);
  return provider.bareCapture(input.payment.reference.chargeId, paymentId);
}
