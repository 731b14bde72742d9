/**
 * The charge as every layer sees it. Pure types and functions only: workflow code imports this.
 */
import type { captureModes } from './capture-modes.js';
import type { declineCodes } from './refusals.js';
import type { ChargeProviderPayment, ProviderPaymentMethod } from './providers.js';

/** How a charge moves its money: the list, which the wire and tool schemas use too, is `captureModes` (src/domain/capture-modes.ts). */
export type CaptureMode = (typeof captureModes)[number];

/** Where the hold stands in the ledger (the truth table of docs/contract.md, Ledger). */
export type HoldState = 'DECLINED' | 'TRIED' | 'CONFIRMED' | 'CANCELLED';

/**
 * The charge lifecycle the callers see (docs/contract.md, Charge lifecycle), in lifecycle order. The one
 * list: the type, the wire schema and the OpenAPI query enum derive from it.
 */
export const chargeStatuses = [
  'pending',
  /** A provider charge whose payer must act (3-D Secure): `provider.nextAction` says how; it expires with the hold. */
  'requires_action',
  'reserved',
  'succeeded',
  'declined',
  /**
   * A provider charge the ledger cancelled (nothing is held in the ledger) whose payment the
   * provider may still hold: the void is being retried. It becomes `cancelled` once the void is recorded.
   */
  'cancelling',
  'cancelled',
  'partially_refunded',
  'refunded',
] as const;

export type ChargeStatus = (typeof chargeStatuses)[number];

/** Why Try declined the charge: the list, with what each means, is `declineCodes` (src/domain/refusals.ts). */
export type DeclineCode = (typeof declineCodes)[number];

/** The business fields of a charge: what the caller asked for, validated. */
export interface ChargeRequest {
  orderId: string;
  /** A provider charge's payer is its clearing account (src/domain/providers.ts, clearingAccountId). */
  payerAccountId: string;
  payeeAccountId: string;
  amountMinor: number;
  currency: string;
  captureMode: CaptureMode;
  description: string | null;
  metadata: Record<string, string> | null;
  /** Present for a charge paid through a provider: the payer's instrument there. */
  paymentMethod?: ProviderPaymentMethod;
  /**
   * A provider charge's return page (https, validated): the provider sends the payer there after
   * authenticating (3-D Secure by redirect), so its `next_action` is a URL a person can open.
   * Absent: the provider's next action is whatever it gives without one (Stripe: `use_stripe_sdk`).
   */
  returnUrl?: string;
}

/** A charge as stored: the ledger row is the source of truth once Try has run. */
export interface Charge {
  id: string;
  tenant: string;
  idempotencyKey: string;
  status: ChargeStatus;
  amountMinor: number;
  amountCapturedMinor: number;
  amountRefundedMinor: number;
  amountHeldMinor: number;
  currency: string;
  orderId: string;
  payerAccountId: string;
  payeeAccountId: string;
  captureMode: CaptureMode;
  description: string | null;
  metadata: Record<string, string> | null;
  declineCode: DeclineCode | null;
  failureReason: string | null;
  /** Audit: the API key whose request created it (null: the operator or before audit; absent: not read from the ledger). */
  createdByKeyId?: string | null;
  holdExpiresAt: string | null;
  createdAt: string;
  updatedAt: string;
  /** A provider charge's provider side; absent for a charge between ledger accounts. */
  provider?: ChargeProviderPayment;
}

/** Statuses after which nothing but refunds can change the charge. */
export const decidedStatuses: ReadonlySet<ChargeStatus> = new Set([
  'succeeded',
  'declined',
  /**
   * A provider charge the ledger cancelled (nothing is held in the ledger) whose payment the
   * provider may still hold: the void is being retried. It becomes `cancelled` once the void is recorded.
   */
  'cancelling',
  'cancelled',
  'partially_refunded',
  'refunded',
]);

export function chargeWorkflowId(tenant: string, idempotencyKey: string): string {
  return `charge/${tenant}/${idempotencyKey}`;
}

/** The status a ledger row implies. */
export function statusOfHold(
  holdState: HoldState,
  amountCapturedMinor: number,
  amountRefundedMinor: number,
  providerState: string | null = null,
): ChargeStatus {
  switch (holdState) {
    case 'DECLINED':
      return 'declined';
    case 'TRIED':
      return providerState === 'requires_action' ? 'requires_action' : 'reserved';
    case 'CANCELLED':
      // Cancelled in the ledger, and the provider may still hold the payment: the void is not recorded yet.
      return providerState === 'authorizing' || providerState === 'authorized' || providerState === 'requires_action' ? 'cancelling' : 'cancelled';
    case 'CONFIRMED':
      if (amountRefundedMinor === 0) return 'succeeded';
      return amountRefundedMinor >= amountCapturedMinor ? 'refunded' : 'partially_refunded';
  }
}

/**
 * Everything the workflow and the ledger need to act on one charge: who asks, under which key,
 * and the validated request with its fingerprint. Built once, by the service.
 */
export interface ChargeIntent {
  tenant: string;
  idempotencyKey: string;
  /** Derived from (tenant, key), so every execution for the key names the same charge. */
  chargeId: string;
  /** SHA-256 hex of the RFC 8785 canonical JSON of the business fields. */
  fingerprint: string;
  request: ChargeRequest;
  /**
   * The API key acting (absent: the operator, accepted only in a tenant that never had a key). The
   * ledger records it on the charge (audit) and judges it, with its mandate, from the key's own row.
   */
  actingKeyId?: string;
  /**
   * The acting key's daily limit in minor units (absent: none). Ignored by the ledger, which reads
   * the limit from the key's row; only a hint that the Try takes a per-key lock and so runs alone.
   */
  dailyLimitMinor?: number;
}
