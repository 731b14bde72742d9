/**
 * Refunds as every layer sees them. Pure types and functions only: workflow code imports this.
 */
import type { refundFailureCodes, refundStatuses } from './refund-outcomes.js';

/** `pending` only while the refund workflow has not answered yet; the ledger knows the other two (the list: src/domain/refund-outcomes.ts). */
export type RefundStatus = (typeof refundStatuses)[number];

/** Why the ledger refused a refund. Both are decisions, final for the refund key (the list: src/domain/refund-outcomes.ts). */
export type RefundFailureCode = (typeof refundFailureCodes)[number];

export interface Refund {
  id: string;
  tenant: string;
  chargeKey: string;
  chargeId: string;
  refundKey: string;
  /** Refunded, or for a failed refund what would have been; for a pending one, what was asked (null: the rest). */
  amountMinor: number | null;
  /** What the caller asked for; null means "everything not yet refunded". */
  requestedAmountMinor: number | null;
  currency: string;
  status: RefundStatus;
  failureCode: RefundFailureCode | null;
  /** Audit: the API key that made it (null: the operator or before audit; absent: not read from the ledger). */
  createdByKeyId?: string | null;
  createdAt: string;
  /**
   * A refund of a provider charge (docs/providers.md, Refunds): the provider's refund id (Stripe:
   * `re_…`) once the provider refunded it. Absent for a ledger charge's refund, and while the
   * provider has not answered.
   */
  providerRefundId?: string;
  /**
   * The provider refused this refund for good: the ledger gave the money back and the provider did
   * not, until an operator settles it (then providerRefundId may appear beside it). Absent otherwise.
   */
  providerRefundFailure?: string;
}

/** One refund request, validated, with its fingerprint. Built once, by the service. */
export interface RefundIntent {
  tenant: string;
  chargeKey: string;
  refundKey: string;
  /** Derived from (tenant, charge key, refund key), so every execution names the same refund. */
  refundId: string;
  /** SHA-256 hex of the RFC 8785 canonical JSON of `{amount}` (null when omitted). */
  fingerprint: string;
  amountMinor: number | null;
  /** The API key making the refund, recorded on it (absent: the operator, or before audit). */
  actingKeyId?: string;
}

/**
 * Percent-encodes '%' and '/' so a key can sit between '/' separators: idempotency keys may
 * contain '/', and `a/b` + `c` must not name the same refund as `a` + `b/c`. Keys without either
 * character are unchanged. The ledger's `ledger_refund_reference` applies the same rule.
 */
export function encodeKeySegment(key: string): string {
  return key.replaceAll('%', '%25').replaceAll('/', '%2F');
}

/** `refund/<tenant>/<charge key>/<refund key>` (docs/contract.md, Temporal), with the charge key encoded. */
export function refundWorkflowId(tenant: string, chargeKey: string, refundKey: string): string {
  return `refund/${tenant}/${encodeKeySegment(chargeKey)}/${refundKey}`;
}

/** The transfer reference of a refund in the journal, as the ledger writes it. */
export function refundTransferReference(chargeKey: string, refundKey: string): string {
  return `${encodeKeySegment(chargeKey)}/${refundKey}`;
}
