import { SearchAttributeType, defineSearchAttributeKey, type SearchAttributePair } from '@temporalio/common';
import type { Charge, ChargeIntent, ChargeStatus } from '../src/domain/charge.js';

/**
 * The custom search attributes a charge is indexed by, one definition for everyone: the workflow
 * upserts them, the service sets them at start, the dev server and the worker's start check derive
 * their lists from here. Pure, so workflow code imports it.
 */
export const chargeSearchAttributeKeys = {
  tenant: defineSearchAttributeKey('ChargeTenant', SearchAttributeType.KEYWORD),
  orderId: defineSearchAttributeKey('ChargeOrderId', SearchAttributeType.KEYWORD),
  payerAccountId: defineSearchAttributeKey('ChargePayerAccountId', SearchAttributeType.KEYWORD),
  status: defineSearchAttributeKey('ChargeStatus', SearchAttributeType.KEYWORD),
} as const;

/**
 * New executions upsert ChargeStatus (with the other three) whenever the status changes;
 * executions started before it replay without the upserts.
 */
export const chargeSearchAttributesPatch = 'charge-search-attributes';

/** The charge's search attributes in a given status; the same four for a start and for an upsert. */
export function chargeSearchAttributePairs(
  charge: Pick<Charge, 'tenant' | 'orderId' | 'payerAccountId'>,
  status: ChargeStatus,
): SearchAttributePair[] {
  const keys = chargeSearchAttributeKeys;
  return [
    { key: keys.tenant, value: charge.tenant },
    { key: keys.orderId, value: charge.orderId },
    { key: keys.payerAccountId, value: charge.payerAccountId },
    { key: keys.status, value: status },
  ];
}

/** What a new charge is started with: its request's values, status pending. */
export function startSearchAttributes(intent: ChargeIntent): SearchAttributePair[] {
  const { tenant, request } = intent;
  return chargeSearchAttributePairs({ tenant, orderId: request.orderId, payerAccountId: request.payerAccountId }, 'pending');
}
