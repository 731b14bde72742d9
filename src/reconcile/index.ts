export { reconcile, reconcileDefaults, reconcileExitCode, outcomeMismatch } from './reconcile.js';
export type { ReconcileCheck, ReconcileCounts, ReconcileOptions, ReconcileReport } from './reconcile.js';
export { formatReconcileReport } from './format.js';
