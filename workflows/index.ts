export { ChargeWorkflow } from './charge-workflow.js';
export { RefundWorkflow } from './refund-workflow.js';
export { OrderAgentWorkflow } from './sample-agent-workflow.js';
