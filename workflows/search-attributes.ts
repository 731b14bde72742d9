import { SearchAttributeType, defineSearchAttributeKey, type SearchAttributePair } from '@temporalio/common';
import type { Charge, ChargeIntent, ChargeStatus } from '../src/domain/charge.js';

/**
 * The custom search attributes a charge is indexed by, one definition for everyone: the service
 * sets the identifying ones in the start request, the workflow upserts ChargeStatus, the dev server
 * and the worker's start check derive their lists from here. Pure, so workflow code imports it.
 */
export const chargeSearchAttributeKeys = {
  tenant: defineSearchAttributeKey('ChargeTenant', SearchAttributeType.KEYWORD),
  orderId: defineSearchAttributeKey('ChargeOrderId', SearchAttributeType.KEYWORD),
  payerAccountId: defineSearchAttributeKey('ChargePayerAccountId', SearchAttributeType.KEYWORD),
  amountMinor: defineSearchAttributeKey('ChargeAmountMinor', SearchAttributeType.INT),
  currency: defineSearchAttributeKey('ChargeCurrency', SearchAttributeType.KEYWORD),
  captureMode: defineSearchAttributeKey('ChargeCaptureMode', SearchAttributeType.KEYWORD),
  status: defineSearchAttributeKey('ChargeStatus', SearchAttributeType.KEYWORD),
} as const;

/**
 * What ChargeStatus says. A charge status, or `cancelling`: a compensation that keeps failing and
 * is being retried (generation 6), which a person may have to look at.
 */
export type IndexedChargeStatus = ChargeStatus | 'cancelling';

type Identified = Pick<Charge, 'tenant' | 'orderId' | 'payerAccountId' | 'amountMinor' | 'currency' | 'captureMode'>;

/** Generations 4 and 5: the three attributes they wrote with every status. */
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

/** What identifies a charge: set once, in the start request, so it costs no write of its own. */
export function identifyingSearchAttributes(charge: Identified): SearchAttributePair[] {
  const keys = chargeSearchAttributeKeys;
  return [
    { key: keys.tenant, value: charge.tenant },
    { key: keys.orderId, value: charge.orderId },
    { key: keys.payerAccountId, value: charge.payerAccountId },
    { key: keys.amountMinor, value: charge.amountMinor },
    { key: keys.currency, value: charge.currency },
    { key: keys.captureMode, value: charge.captureMode },
  ];
}

/**
 * Generation 6's one upsert, where a person may have to act: the identifying attributes again (a
 * child charge started by an agent's workflow carries none from its start) and the status.
 */
export function actionNeededSearchAttributes(charge: Identified, status: IndexedChargeStatus): SearchAttributePair[] {
  return [...identifyingSearchAttributes(charge), { key: chargeSearchAttributeKeys.status, value: status }];
}

/** What a new charge is started with: its request's identifying values, and no status. */
export function startSearchAttributes(intent: ChargeIntent): SearchAttributePair[] {
  const { tenant, request } = intent;
  return identifyingSearchAttributes({ tenant, ...request });
}
