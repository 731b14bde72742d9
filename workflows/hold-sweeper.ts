import { proxyActivities } from '@temporalio/workflow';
import type { HoldSweeperActivities, ReleaseOutcome } from '../activities/index.js';
import type { Charge } from '../src/domain/charge.js';
import { cancelReasons } from '../src/domain/refusals.js';
import type { HoldSweepInput, HoldSweepResult, ReleaseHoldInput } from './definitions.js';

/** Backoff shared with the ledger steps: quick first retries, capped so recovery is noticed fast. */
const retryBackoff = { initialInterval: '200 milliseconds', backoffCoefficient: 2, maximumInterval: '10 seconds' } as const;

/** Describe calls in flight at once while looking for orphans: the frontend is shared with charges. */
const describeConcurrency = 8;
/** Held charges read per page while looking for orphans. */
const orphanPageSize = 100;

/**
 * Releases one hold that its ChargeWorkflow will never settle, on a caller's cancel. Like a
 * charge's compensation it has no budget: the ledger's Cancel is retried until it succeeds.
 * Its result is the charge as the ledger has it afterwards (null for a key the ledger never saw).
 */
export async function ReleaseHoldWorkflow(input: ReleaseHoldInput): Promise<Charge | null> {
  const { releaseHold } = proxyActivities<HoldSweeperActivities>({
    startToCloseTimeout: input.activityStartToCloseMs,
    retry: retryBackoff,
  });
  const outcome = await releaseHold({
    tenant: input.tenant,
    idempotencyKey: input.idempotencyKey,
    reason: input.reason,
    onlyIfOrphaned: true,
  });
  return outcome.charge;
}

/**
 * One sweep, started by the hold sweeper's Temporal Schedule: voids holds nobody will settle.
 * - expired: TRIED past hold_expires_at plus a grace (the charge's own timer should have voided
 *   it); voided whether or not a workflow still runs, as its own timer would have.
 * - orphaned: TRIED while no ChargeWorkflow of the key runs (terminated, reset, forgotten, a bug).
 * At most `releaseBatchSize` holds per sweep, so one sweep stays short and the next picks up the
 * rest. A release that keeps failing fails this sweep after its retries; the next sweep tries it
 * again, so no hold is given up on.
 */
export async function HoldSweeperWorkflow(input: HoldSweepInput): Promise<HoldSweepResult> {
  const { findExpiredHolds, findOrphanedHolds } = proxyActivities<HoldSweeperActivities>({
    startToCloseTimeout: '2 minutes',
    retry: { ...retryBackoff, maximumAttempts: 5 },
  });
  const { releaseHold } = proxyActivities<HoldSweeperActivities>({
    startToCloseTimeout: input.activityStartToCloseMs,
    retry: { ...retryBackoff, maximumAttempts: 10 },
  });

  const result: HoldSweepResult = { expiredReleased: 0, orphanedReleased: 0, orphanCandidatesExamined: 0, batchFull: false };
  const count = (outcome: ReleaseOutcome, kind: 'expiredReleased' | 'orphanedReleased') => {
    if (outcome.released) result[kind]++;
  };

  const tenant = input.tenant ?? null;
  const expired = await findExpiredHolds({ graceMs: input.expiredGraceMs, limit: input.releaseBatchSize, tenant });
  for (const hold of expired) {
    count(await releaseHold({ ...hold, reason: cancelReasons.holdExpired, onlyIfOrphaned: false }), 'expiredReleased');
  }

  const left = input.releaseBatchSize - expired.length;
  if (left <= 0) return { ...result, batchFull: expired.length > 0 };
  const { orphans, examined } = await findOrphanedHolds({
    minAgeMs: input.orphanMinAgeMs,
    tenant,
    limit: left,
    examinedMax: input.orphanExaminedMax,
    pageSize: orphanPageSize,
    concurrency: describeConcurrency,
  });
  result.orphanCandidatesExamined = examined;
  for (const hold of orphans) {
    count(await releaseHold({ ...hold, reason: cancelReasons.holdOrphaned, onlyIfOrphaned: true }), 'orphanedReleased');
  }
  result.batchFull = orphans.length >= left;
  return result;
}
