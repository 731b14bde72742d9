export { createLedgerActivities } from './ledger-activities.js';
export type { LedgerActivities, LedgerActivityHooks, LedgerStep } from './ledger-activities.js';
