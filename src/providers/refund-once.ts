/**
 * Refund with the retention rule applied, as authorizeOnce authorizes: while the provider still
 * keeps the key's answer, a retry is the same request again; once it may have pruned the key, the
 * same key would refund a second time, so the payment's refunds are read first and only a lookup
 * that finds none of ours lets the refund be sent.
 */
import { keyMayHaveExpired, type PaymentConnector, type RefundReference, type RefundRequest, type RefundResult } from './connector.js';

export interface RefundTiming {
  /**
   * No request for this refund was sent before this (the ledger's refund decision is made before
   * the first send, so its time serves: the rule then looks a little early, never too late).
   */
  firstSentNotBeforeMs: number;
  nowMs: number;
}

export async function refundOnce(
  connector: PaymentConnector,
  request: RefundRequest & { reference: RefundReference },
  timing: RefundTiming,
): Promise<RefundResult> {
  if (!keyMayHaveExpired(connector, timing.firstSentNotBeforeMs, timing.nowMs)) return connector.refund(request);
  const lookup = await connector.findRefund({ paymentId: request.paymentId, refundId: request.reference.refundId });
  switch (lookup.outcome) {
    case 'not_found':
      return connector.refund(request);
    case 'found':
      return { outcome: 'refunded', refund: lookup.refund };
    case 'unknown':
      return lookup;
    case 'rejected':
      // The lookup was refused, not the refund: nothing is known about whether it exists, and
      // recording a refusal the provider never gave would strand money. Ask again later.
      return {
        outcome: 'unknown',
        reason: 'lookup_incomplete',
        detail: `looking up refund ${request.reference.refundId} of ${request.paymentId} before resending was refused (${lookup.reason}): ${lookup.detail}`,
      };
  }
}
