import type { ChargeRequest } from './charge.js';

/**
 * What an API key may charge: each rule optional (null: no such rule). Checked by the service
 * before anything starts (`mandateRefusal`), so a caller learns which rule it broke; and every rule
 * is judged again inside the ledger's Try from the key's own row (never from the workflow input,
 * which a forger writes), where the daily limit is summed exactly, serialised per key.
 */
export interface Mandate {
  /** The largest single charge, in minor units. */
  maxAmountMinor: number | null;
  /** The most the key's charges may hold or capture in any rolling 24 h, in minor units. */
  dailyLimitMinor: number | null;
  /** The only payee accounts the key may charge to. */
  allowedPayeeAccountIds: readonly string[] | null;
  /** The only currency the key may charge in (ISO 4217, upper case). */
  currency: string | null;
  /** After this instant (ISO 8601) the key authenticates nothing. */
  expiresAt: string | null;
}

export const noMandate: Mandate = {
  maxAmountMinor: null,
  dailyLimitMinor: null,
  allowedPayeeAccountIds: null,
  currency: null,
  expiresAt: null,
};

export function hasMandate(mandate: Mandate): boolean {
  return Object.values(mandate).some((value) => value !== null);
}

/** The mandate rules a charge can break, named as `rule` on the refusal. The one list: the type and the wire enums derive from it. */
export const mandateRules = ['max_amount', 'daily_limit', 'payees', 'currency', 'expires_at'] as const;

export type MandateRule = (typeof mandateRules)[number];

export interface MandateRefusal {
  rule: MandateRule;
  detail: string;
}

/**
 * Why this charge is outside the mandate, or null when it is inside. The daily limit's rolling total
 * is not judged here (it needs the key's recent charges: `dailyLimitRefusal`, with the total the
 * service reads from the ledger before starting anything) except that a single charge larger than
 * the whole limit can never fit.
 */
export function mandateRefusal(mandate: Mandate, request: ChargeRequest, nowMs: number): MandateRefusal | null {
  if (mandate.expiresAt !== null && Date.parse(mandate.expiresAt) <= nowMs) {
    return { rule: 'expires_at', detail: `this key expired at ${mandate.expiresAt}` };
  }
  if (mandate.maxAmountMinor !== null && request.amountMinor > mandate.maxAmountMinor) {
    return {
      rule: 'max_amount',
      detail: `amount ${request.amountMinor} exceeds this key's largest charge of ${mandate.maxAmountMinor}`,
    };
  }
  if (mandate.dailyLimitMinor !== null && request.amountMinor > mandate.dailyLimitMinor) {
    return {
      rule: 'daily_limit',
      detail: `amount ${request.amountMinor} exceeds this key's daily limit of ${mandate.dailyLimitMinor}`,
    };
  }
  if (mandate.currency !== null && request.currency !== mandate.currency) {
    return { rule: 'currency', detail: `currency ${request.currency} is not this key's currency ${mandate.currency}` };
  }
  if (mandate.allowedPayeeAccountIds !== null && !mandate.allowedPayeeAccountIds.includes(request.payeeAccountId)) {
    return {
      rule: 'payees',
      detail: `payee ${request.payeeAccountId} is not among this key's payees (${mandate.allowedPayeeAccountIds.join(', ')})`,
    };
  }
  return null;
}

/**
 * Why this charge does not fit the key's rolling 24 h total, or null when it fits. `usedMinor` is
 * what the key's other charges of the last 24 h hold or captured, summed as the ledger's Try sums it
 * (held plus captured; declined and cancelled charges count zero). Judged by the service before
 * anything starts; the ledger's Try judges it again, serialised per key, for charges that raced
 * each other past this check.
 */
export function dailyLimitRefusal(dailyLimitMinor: number, usedMinor: number, amountMinor: number): MandateRefusal | null {
  if (usedMinor + amountMinor <= dailyLimitMinor) return null;
  return {
    rule: 'daily_limit',
    detail:
      `amount ${amountMinor} with the ${usedMinor} this key charged in the last 24 hours exceeds its daily limit of ${dailyLimitMinor} ` +
      `(${Math.max(0, dailyLimitMinor - usedMinor)} left)`,
  };
}
