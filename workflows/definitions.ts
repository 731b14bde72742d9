import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { Charge, ChargeIntent } from '../src/domain/charge.js';
import type { Refund, RefundIntent } from '../src/domain/refund.js';

export const chargeTaskQueue = 'charges';
export const chargeWorkflowType = 'ChargeWorkflow';
export const refundWorkflowType = 'RefundWorkflow';

/** Timeouts and budgets of one charge, fixed at start so every replay sees the same ones. */
export interface ChargePolicy {
  /** How long one attempt of a ledger step may run before Temporal retries it. */
  activityStartToCloseMs: number;
  /** How long Try may keep failing on system faults before the charge is compensated. */
  tryBudgetMs: number;
  /** How long Confirm may keep failing on system faults before the charge is compensated. */
  confirmBudgetMs: number;
  /** Manual capture: how long the hold waits for a capture before it is voided. */
  holdTtlMs: number;
  /**
   * How long a compensation may keep failing before the charge is indexed as needing a person
   * (ChargeStatus `cancelling`, generation 6); Cancel is retried until it succeeds either way.
   * Absent: 30 s (workflows/ledger-steps.ts).
   */
  compensationAlertAfterMs?: number;
  /**
   * The longest wait between two attempts of a ledger step (Try, Confirm, Cancel, read). After a
   * database restart a step is retried at most this long after the database is back. Absent (charges
   * started before the setting existed): 10 s, the options they started with.
   */
  ledgerRetryMaxIntervalMs?: number;
  /**
   * Provider charges: how long authorize may go without an answer from the provider (timeouts,
   * 5xx, 429) before the charge is cancelled and whatever the provider holds is voided. Absent:
   * 120 s (workflows/provider-steps.ts), room for the SDK's own retries of 20 s attempts.
   */
  providerAuthorizeBudgetMs?: number;
  /** Provider charges: how long one attempt of a provider step may run. Absent: 90 s. */
  providerStepStartToCloseMs?: number;
  /**
   * Provider charges: how long a void may keep failing before the charge is indexed `cancelling`
   * and a waiting cancel is answered with it; the void is retried until done either way. Absent:
   * 3 s (workflows/provider-steps.ts).
   */
  providerVoidAlertAfterMs?: number;
}

export interface ChargeWorkflowInput {
  intent: ChargeIntent;
  policy: ChargePolicy;
}

/** What the memo carries, so an attaching caller can compare fingerprints without running workflow code. */
export interface ChargeMemo {
  fingerprint: string;
}

export interface CaptureArgs {
  /** Capture less than authorised; the rest is released. Null captures the whole hold. */
  amountMinor: number | null;
}

export const chargeStatusQuery = defineQuery<Charge>('status');

/**
 * A provider's verified event about a provider charge's payment (the webhook receiver signals it,
 * deduplicated by event id). A snapshot, in any order and possibly late: the workflow never takes
 * it as the truth, only as the moment to look the payment up again.
 */
export interface ProviderEventSignal {
  /** The provider's event id (Stripe: `evt_…`). */
  eventId: string;
  /** The provider's event type (Stripe: `payment_intent.amount_capturable_updated`). */
  type: string;
  paymentId: string | null;
}
export const providerEventSignal = defineSignal<[ProviderEventSignal]>('providerEvent');
export const cancelChargeUpdate = defineUpdate<Charge, []>('cancel');
export const captureChargeUpdate = defineUpdate<Charge, [CaptureArgs]>('capture');

export interface RefundWorkflowInput {
  intent: RefundIntent;
  /** The refund as callers see it until the ledger answers (status pending). */
  pending: Refund;
  /** Only the activity timeout applies: a refund holds nothing, so it is retried until it is answered. */
  policy: Pick<ChargePolicy, 'activityStartToCloseMs'>;
}

/** What a refund workflow's memo carries, for callers that attach to it (as ChargeMemo). */
export interface RefundMemo {
  fingerprint: string;
}

export const refundStatusQuery = defineQuery<Refund>('status');

export const releaseHoldWorkflowType = 'ReleaseHoldWorkflow';
export const holdSweeperWorkflowType = 'HoldSweeperWorkflow';

/** `release/<tenant>/<key>`: at most one release of a charge's hold runs at a time. */
export function releaseHoldWorkflowId(tenant: string, idempotencyKey: string): string {
  return `release/${tenant}/${idempotencyKey}`;
}

/** Releases one hold that no ChargeWorkflow will settle (its workflow closed without doing so). */
export interface ReleaseHoldInput {
  tenant: string;
  idempotencyKey: string;
  /** Stored as the charge's failure_reason when this release is the one that voids the hold. */
  reason: string;
  activityStartToCloseMs: number;
}

/** One sweep of holds nobody settles; every bound carries its unit. */
export interface HoldSweepInput {
  /** At most this many holds are released per sweep (expired and orphaned together). */
  releaseBatchSize: number;
  /** A hold is expired once it is this long past its hold_expires_at (its own timer had its chance). */
  expiredGraceMs: number;
  /** Holds younger than this are never judged orphaned (their workflow may be starting). */
  orphanMinAgeMs: number;
  /** At most this many held charges have their workflow described per sweep. */
  orphanExaminedMax: number;
  activityStartToCloseMs: number;
  /** Only this tenant's holds (an operator's targeted sweep, a test's); every tenant when absent. */
  tenant?: string | null;
}

export interface HoldSweepResult {
  expiredReleased: number;
  orphanedReleased: number;
  /** Held charges whose workflow was described this sweep. */
  orphanCandidatesExamined: number;
  /** True when the batch size stopped the sweep before every stranded hold found was released. */
  batchFull: boolean;
}
