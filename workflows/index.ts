export { ChargeWorkflow } from './charge-workflow.js';
