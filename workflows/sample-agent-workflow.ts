import { workflowInfo } from '@temporalio/workflow';
import type { Charge, ChargeIntent } from '../src/domain/charge.js';
import { chargeFromWorkflow } from './agent-charge.js';
import type { ChargePolicy } from './definitions.js';

export interface OrderAgentInput {
  /** The charges this agent decided on, built by ChargeService.buildIntent when the agent was started. */
  intents: ChargeIntent[];
  policy: ChargePolicy;
  /** Where ChargeWorkflow workers listen, when not on the default queue. */
  chargeTaskQueue?: string;
}

export interface OrderAgentResult {
  runId: string;
  charges: Charge[];
}

/**
 * A sample agent that is itself a workflow: it charges its orders one after the other through
 * chargeFromWorkflow and reports what it got. Reset it, retry it, replay it: each order is charged
 * once, and every run reports the same charges.
 */
export async function OrderAgentWorkflow({ intents, policy, chargeTaskQueue }: OrderAgentInput): Promise<OrderAgentResult> {
  const charges: Charge[] = [];
  for (const intent of intents) {
    charges.push(await chargeFromWorkflow(intent, policy, chargeTaskQueue ? { taskQueue: chargeTaskQueue } : {}));
  }
  return { runId: workflowInfo().runId, charges };
}
