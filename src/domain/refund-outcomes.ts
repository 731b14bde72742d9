/**
 * How a refund can end. The one lists: the RefundStatus and RefundFailureCode types
 * (src/domain/refund.ts), the wire schema and the refusal hints (`refundRefusals`,
 * src/domain/refusals.ts) derive from them. A module of its own, imported by workflow code as a type
 * only, so that a change to the wire side never changes the workflow bundle.
 */

/** `pending` only while the refund workflow has not answered yet; the ledger knows the other two. */
export const refundStatuses = ['pending', 'succeeded', 'failed'] as const;

/** Why the ledger refused a refund. Both are decisions, final for the refund key. */
export const refundFailureCodes = ['exceeds_refundable', 'insufficient_funds'] as const;
