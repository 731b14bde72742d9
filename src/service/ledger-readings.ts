import type { LedgerPool } from '../ledger/pool.js';
import { overdueHolds, pendingProviderVoids } from '../reconcile/index.js';

/**
 * What readiness and /metrics read from the ledger, for the API: whether it answers, and the
 * gauges of holds past their expiry and provider voids not yet recorded. Each is one indexed query.
 */
export class LedgerReadings {
  constructor(private readonly ledger: LedgerPool) {}

  /** One round trip; rejects when the database cannot be reached. */
  async ping(): Promise<void> {
    await this.ledger.query('SELECT 1');
  }

  overdueHolds(): ReturnType<typeof overdueHolds> {
    return overdueHolds(this.ledger);
  }

  pendingProviderVoids(): ReturnType<typeof pendingProviderVoids> {
    return pendingProviderVoids(this.ledger);
  }
}
