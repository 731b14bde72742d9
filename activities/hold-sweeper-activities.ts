import { ApplicationFailure } from '@temporalio/common';
import { chargeWorkflowId, type Charge } from '../src/domain/charge.js';
import { findExpiredHolds, listHeldCharges, releaseHold, type HeldChargeKey } from '../src/ledger/holds.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import type { LedgerCharge } from '../src/ledger/charges.js';

/** A hold the sweeper found stranded, and why. */
export interface StrandedHold {
  tenant: string;
  idempotencyKey: string;
}

export interface OrphanSearch {
  minAgeMs: number;
  /** Only this tenant's holds; every tenant when absent. */
  tenant?: string | null;
  /** Stop once this many orphans are found. */
  limit: number;
  /** Describe at most this many held charges' workflows. */
  examinedMax: number;
  /** Held charges read from the ledger per page (one page in memory at a time). */
  pageSize: number;
  /** Describe calls in flight at once. */
  concurrency: number;
}

export interface ReleaseRequest {
  tenant: string;
  idempotencyKey: string;
  reason: string;
  /** Release only if no ChargeWorkflow of the key is running (asked again right before releasing). */
  onlyIfOrphaned: boolean;
}

export interface ReleaseOutcome {
  /** True when this call voided the hold (it was TRIED and Cancel released it). */
  released: boolean;
  /** The charge as the ledger has it afterwards; null for a key the ledger never saw. */
  charge: Charge | null;
}

/**
 * Whether a workflow id's latest execution is running; false when Temporal does not know it
 * (forgotten after the retention period, or never started). The worker builds it from its
 * Temporal client: the one thing these activities may ask Temporal, and they never start anything.
 */
export type WorkflowRunningProbe = (workflowId: string) => Promise<boolean>;

/**
 * The sweeper's side effects: reading the ledger, asking whether charge workflows run, releasing
 * holds through the ledger's idempotent Cancel.
 */
/**
 * The provider half of a release: voids what the provider holds for a provider charge the ledger
 * has cancelled (activities/provider-activities.ts, voidAtProvider); a no-op for any other charge.
 */
export type ProviderVoid = (tenant: string, idempotencyKey: string) => Promise<LedgerCharge | null>;

export function createHoldSweeperActivities(pool: LedgerPool, isWorkflowRunning: WorkflowRunningProbe | null, providerVoid: ProviderVoid | null = null) {
  async function isChargeWorkflowRunning(tenant: string, idempotencyKey: string): Promise<boolean> {
    // Without a probe nothing can tell an orphan from a hold whose workflow is waiting: refuse.
    if (!isWorkflowRunning) {
      throw ApplicationFailure.nonRetryable('this worker cannot ask Temporal about charge workflows', 'SweeperMisconfigured');
    }
    return isWorkflowRunning(chargeWorkflowId(tenant, idempotencyKey));
  }

  return {
    async findExpiredHolds(options: { graceMs: number; limit: number; tenant?: string | null }): Promise<StrandedHold[]> {
      return (await findExpiredHolds(pool, options)).map(({ tenant, idempotencyKey }) => ({ tenant, idempotencyKey }));
    },

    /** Pages through held charges, oldest first, and returns those whose ChargeWorkflow is not running. */
    async findOrphanedHolds(search: OrphanSearch): Promise<{ orphans: StrandedHold[]; examined: number }> {
      const orphans: StrandedHold[] = [];
      let examined = 0;
      let after: HeldChargeKey | null = null;
      while (orphans.length < search.limit && examined < search.examinedMax) {
        const page = await listHeldCharges(pool, {
          minAgeMs: search.minAgeMs,
          tenant: search.tenant ?? null,
          after,
          limit: Math.min(search.pageSize, search.examinedMax - examined),
        });
        if (page.length === 0) break;
        for (let i = 0; i < page.length && orphans.length < search.limit; i += search.concurrency) {
          const slice = page.slice(i, i + search.concurrency);
          const running = await Promise.all(slice.map((held) => isChargeWorkflowRunning(held.tenant, held.idempotencyKey)));
          examined += slice.length;
          slice.forEach((held, j) => {
            if (!running[j] && orphans.length < search.limit) orphans.push({ tenant: held.tenant, idempotencyKey: held.idempotencyKey });
          });
        }
        after = page[page.length - 1]!;
      }
      return { orphans, examined };
    },

    /**
     * Voids one hold. Whether its workflow runs is asked again here, just before Cancel: a charge
     * whose workflow came back (a new execution after the retention period) is left to it. Should
     * one start right after this check, the ledger still arbitrates: its Try answers the existing
     * row, its Confirm is refused once the hold is cancelled, and money never moves twice.
     */
    async releaseHold(request: ReleaseRequest): Promise<ReleaseOutcome> {
      if (request.onlyIfOrphaned && (await isChargeWorkflowRunning(request.tenant, request.idempotencyKey))) {
        return { released: false, charge: null };
      }
      const { released, row } = await releaseHold(pool, request.tenant, request.idempotencyKey, request.reason);
      // A provider charge's authorization is voided too, after the ledger's Cancel as in the charge's
      // own compensation; also on a retry that finds the hold already released (the void is idempotent).
      if (row?.charge.provider && row.holdState === 'CANCELLED' && row.charge.provider.state !== 'voided') {
        if (!providerVoid) throw new Error(`charge ${request.idempotencyKey} is a provider charge and this worker has no provider connectors to void it`);
        // The row as the void left it: cancelled, not the cancelling it was between the two steps.
        const voided = await providerVoid(request.tenant, request.idempotencyKey);
        return { released, charge: (voided ?? row).charge };
      }
      return { released, charge: row?.charge ?? null };
    },
  };
}

export type HoldSweeperActivities = ReturnType<typeof createHoldSweeperActivities>;
