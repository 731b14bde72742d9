export { reconcile, reconcileDefaults, reconcileExitCode, outcomeMismatch, ReconcileTimeoutError, reconcileStatementTimeoutMsMax } from './reconcile.js';
export type { ReconcileCheck } from './check.js';
export type { ReconcileCounts, ReconcileOptions, ReconcileReport } from './reconcile.js';
export { formatReconcileReport } from './format.js';
// Holds past their expiry, for the API's metrics: the same question as the no_expired_holds check.
export { overdueHolds, type OverdueHolds } from '../ledger/holds.js';
export { pendingProviderVoids, type PendingProviderVoids } from '../ledger/provider-charges.js';
export {
  assertWindowHours,
  formatProviderReconcileReport,
  duplicateVoidKey,
  providerReconcileExitCode,
  providerReconcileHoldTtlMsDefault,
  providerReconcileWindowHoursDefault,
  providerReconcileWindowHoursMax,
  reconcileProvider,
} from './provider.js';
export type { OrphanVoid, ProviderReconcileOptions, ProviderReconcileReport } from './provider.js';
