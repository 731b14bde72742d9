import { defineQuery, defineUpdate } from '@temporalio/workflow';
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
