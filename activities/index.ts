export { createLedgerActivities } from './ledger-activities.js';
export type { LedgerActivities, LedgerActivityHooks, LedgerStep } from './ledger-activities.js';
export { createRefundActivities } from './refund-activities.js';
export type { RefundActivities, RefundActivityHooks } from './refund-activities.js';
export { createHoldSweeperActivities } from './hold-sweeper-activities.js';
export type {
  HoldSweeperActivities,
  OrphanSearch,
  ReleaseOutcome,
  ReleaseRequest,
  StrandedHold,
  WorkflowRunningProbe,
} from './hold-sweeper-activities.js';
export { createProviderActivities } from './provider-activities.js';
export type { ProviderActivities, ProviderActivityHooks, ProviderActivityStep } from './provider-activities.js';
