import type { ChargeService } from '../../src/service/charge-service.js';
import type { Operation } from './load.js';
import { spreadPicker, type Picker, type Population } from './population.js';

/** What the callers of one scenario were told, so the ledger can be checked against it. */
export class ChargeTally {
  succeeded = 0;
  /** Charges whose caller got no decision (error, or still running at the wait budget). */
  readonly unsettled: { key: string; body: Record<string, unknown> }[] = [];
}

export function chargeBody(key: string, payer: string, payee: string, capture: 'automatic' | 'manual' = 'automatic') {
  return { order_id: `order-${key}`, payer_account_id: payer, payee_account_id: payee, amount: 100, currency: 'USD', capture };
}

/** A charge through a provider: the card pays (no payer account), captured at once. */
export function providerChargeBody(key: string, payee: string, paymentMethod = 'pm_card_visa') {
  return { order_id: `order-${key}`, payment_method: paymentMethod, payee_account_id: payee, amount: 100, currency: 'USD', capture: 'automatic' };
}

/**
 * One new charge per call, through ChargeService (validation, account check, start, wait): the
 * path every surface takes. Only a charge its caller saw succeed counts as done.
 */
export function chargeOperation(
  charges: ChargeService,
  options: { tenant: string; keyPrefix: string; payer: Picker; payee: Picker; tally: ChargeTally },
): Operation {
  return bodyChargeOperation(charges, {
    ...options,
    body: (key, sequence) => chargeBody(key, options.payer(sequence), options.payee(sequence)),
  });
}

/** New charges of `keyPrefix`, their payers and payees spread over the population (P5 and the tail experiment). */
export function spreadChargeOperation(charges: ChargeService, population: Population, tally: ChargeTally, keyPrefix: string): Operation {
  return chargeOperation(charges, {
    tenant: population.tenant,
    keyPrefix,
    payer: spreadPicker(population.payers),
    payee: spreadPicker(population.payees),
    tally,
  });
}

/** chargeOperation with the body of the n-th charge given by the caller (a provider charge's, say). */
export function bodyChargeOperation(
  charges: ChargeService,
  options: { tenant: string; keyPrefix: string; body: (key: string, sequence: number) => Record<string, unknown>; tally: ChargeTally },
): Operation {
  return async (sequence) => {
    const key = `${options.keyPrefix}-${sequence}`;
    const body = options.body(key, sequence);
    let status: string;
    try {
      const reply = await charges.charge(options.tenant, key, body);
      status = reply.completed ? reply.charge.status : 'still running';
    } catch (error) {
      options.tally.unsettled.push({ key, body });
      throw error;
    }
    if (status === 'succeeded') {
      options.tally.succeeded++;
      return;
    }
    if (status === 'still running') options.tally.unsettled.push({ key, body });
    throw new Error(`charge ${key} answered ${status}`);
  };
}

/**
 * Asks again for every charge whose caller got no decision (the way a real caller settles it: the
 * same key, the same body), so the tally the ledger is checked against is complete.
 */
export async function settleUnsettled(charges: ChargeService, tenant: string, tally: ChargeTally): Promise<void> {
  const pending = tally.unsettled.splice(0, tally.unsettled.length);
  for (const { key, body } of pending) {
    const reply = await charges.charge(tenant, key, body);
    if (!reply.completed) throw new Error(`charge ${key} is still undecided after a full wait budget`);
    if (reply.charge.status === 'succeeded') tally.succeeded++;
  }
}
