export { ChargeWorkflow } from './charge-workflow.js';
export { RefundWorkflow } from './refund-workflow.js';
export { OrderAgentWorkflow } from './sample-agent-workflow.js';
export { HoldSweeperWorkflow, ReleaseHoldWorkflow } from './hold-sweeper.js';
