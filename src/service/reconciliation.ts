import type { Client } from '@temporalio/client';
import type { LedgerPool } from '../ledger/pool.js';
import { reconcile, reconcileProvider, type ProviderReconcileOptions, type ReconcileOptions } from '../reconcile/index.js';

/**
 * The reconciliations the CLI runs (docs/reconcile.md): the ledger against itself and Temporal, and
 * the ledger against a payment provider. The checks are src/reconcile's; this holds the ledger pool
 * (and Temporal client) they read, so that no surface takes one.
 */
export class Reconciliation {
  constructor(private readonly sources: { ledger: LedgerPool; temporal: Client | null }) {}

  /** The ledger's invariants and its charges against their workflows (skipped without a Temporal client). */
  ledgerAndWorkflows(options: Omit<ReconcileOptions, 'ledger' | 'temporal'>): ReturnType<typeof reconcile> {
    return reconcile({ ...options, ledger: this.sources.ledger, temporal: this.sources.temporal });
  }

  /** The provider charges of the window against what the provider says of them. */
  provider(options: Omit<ProviderReconcileOptions, 'ledger'>): ReturnType<typeof reconcileProvider> {
    return reconcileProvider({ ...options, ledger: this.sources.ledger });
  }
}
