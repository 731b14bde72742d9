import { randomInt } from 'node:crypto';
import { Progress } from '../support/progress.js';
import type { ChargeService } from '../service/charge-service.js';
import type { Charge } from '../domain/charge.js';
import { createAccount, deposit, getAccount } from '../ledger/accounts.js';
import { checkLedgerInvariants, type InvariantCheck } from '../ledger/invariants.js';
import type { LedgerPool } from '../ledger/pool.js';
import { captureTotals } from '../ledger/reports.js';
import { FlakyLink, ResponseDroppedError, type FlakyLinkOdds } from './flaky-link.js';

export interface DemoOptions {
  orders: number;
  concurrentAgents: number;
  payers: number;
  /** Each payer's opening balance; some orders are priced to exceed it, so some charges decline. */
  payerDepositMinor: number;
  /** How many times an agent retries one order before giving up on it. */
  maxAttemptsPerOrder: number;
  odds: FlakyLinkOdds;
}

export const defaultDemoOptions: DemoOptions = {
  orders: 300,
  concurrentAgents: 16,
  payers: 20,
  payerDepositMinor: 50_000,
  maxAttemptsPerOrder: 10,
  odds: { dropResponseAfterCommit: 0.3, sendDuplicatesAtOnce: 0.2 },
};

export interface DemoTotals {
  tenant: string;
  orders: number;
  requestsSent: number;
  responsesDropped: number;
  duplicateBursts: number;
  agentRetries: number;
  ordersAnswered: number;
  succeeded: number;
  declined: number;
  otherOutcomes: number;
  chargeRows: number;
  debits: number;
  keysDebitedMoreThanOnce: number;
  debitedMinor: number;
  creditedToMerchantMinor: number;
  agentSeenSucceededMinor: number;
  invariants: InvariantCheck[];
}

/**
 * Agents charging orders over a flaky link: answers lost after the money moved, retries with the
 * same key, duplicates fired at once. The ledger totals at the end show one debit per key.
 */
export async function runFlakyAgentDemo(
  charges: ChargeService,
  ledger: LedgerPool,
  options: DemoOptions = defaultDemoOptions,
): Promise<DemoTotals> {
  const tenant = `demo-${Date.now().toString(36)}`;
  await createAccount(ledger, { tenant, id: 'merchant', currency: 'USD', allowOverdraft: false });
  for (let p = 0; p < options.payers; p++) {
    const id = `payer-${p}`;
    await createAccount(ledger, { tenant, id, currency: 'USD', allowOverdraft: false });
    await deposit(ledger, tenant, id, options.payerDepositMinor, `opening-${id}`);
  }

  const link = new FlakyLink(options.odds);
  const outcomes = new Map<string, Charge>();
  let agentRetries = 0;
  let done = 0;
  const progress = new Progress('charging orders over a flaky link', options.orders);

  async function chargeOrder(orderIndex: number): Promise<void> {
    const key = `order-${orderIndex}`;
    const body = {
      order_id: `ord_${orderIndex}`,
      payer_account_id: `payer-${orderIndex % options.payers}`,
      payee_account_id: 'merchant',
      // Mostly small orders; one in ten is priced above any payer's balance and must decline.
      amount: orderIndex % 10 === 9 ? options.payerDepositMinor + 1 : 100 + randomInt(4_900),
      currency: 'USD',
    };
    for (let attempt = 1; attempt <= options.maxAttemptsPerOrder; attempt++) {
      try {
        const reply = await link.send(() => charges.charge(tenant, key, body));
        if (!reply.completed) throw new ResponseDroppedError('still processing');
        outcomes.set(key, reply.charge);
        return;
      } catch (error) {
        if (!(error instanceof ResponseDroppedError)) throw error;
        agentRetries++; // same key, same body: the retry can only replay, never charge again
      }
    }
  }

  let next = 0;
  async function agent(): Promise<void> {
    while (next < options.orders) {
      const orderIndex = next++;
      await chargeOrder(orderIndex);
      progress.update(++done, `(${link.counters.responsesDropped} answers lost, ${agentRetries} retries)`);
    }
  }
  await Promise.all(Array.from({ length: options.concurrentAgents }, agent));
  progress.finish(`${done} orders in ${options.concurrentAgents} concurrent agents`);

  const totals = await captureTotals(ledger, tenant);
  const merchant = await getAccount(ledger, tenant, 'merchant');
  const seen = [...outcomes.values()];
  return {
    tenant,
    orders: options.orders,
    ...link.counters,
    agentRetries,
    ordersAnswered: outcomes.size,
    succeeded: seen.filter((c) => c.status === 'succeeded').length,
    declined: seen.filter((c) => c.status === 'declined').length,
    otherOutcomes: seen.filter((c) => c.status !== 'succeeded' && c.status !== 'declined').length,
    chargeRows: totals.chargeRows,
    debits: totals.captureTransfers,
    keysDebitedMoreThanOnce: totals.keysCapturedMoreThanOnce,
    debitedMinor: totals.debitedMinor,
    creditedToMerchantMinor: merchant?.postedMinor ?? 0,
    agentSeenSucceededMinor: seen.filter((c) => c.status === 'succeeded').reduce((sum, c) => sum + c.amountCapturedMinor, 0),
    invariants: await checkLedgerInvariants(ledger, tenant),
  };
}

export function formatDemoTotals(t: DemoTotals): string {
  const brokenInvariants = t.invariants.filter((i) => i.violations > 0);
  const lines = [
    `tenant                         ${t.tenant}`,
    `orders                         ${t.orders}`,
    `requests sent                  ${t.requestsSent} (${t.duplicateBursts} bursts of concurrent duplicates)`,
    `answers lost after commit      ${t.responsesDropped}, retried with the same key ${t.agentRetries} times`,
    `orders answered                ${t.ordersAnswered}: ${t.succeeded} succeeded, ${t.declined} declined, ${t.otherOutcomes} other`,
    `ledger charge rows             ${t.chargeRows}`,
    `debits in the journal          ${t.debits} (one per succeeded key: ${t.debits === t.succeeded ? 'yes' : 'NO'})`,
    `keys debited more than once    ${t.keysDebitedMoreThanOnce}`,
    `debited from payers            ${t.debitedMinor} minor units`,
    `credited to the merchant       ${t.creditedToMerchantMinor} minor units`,
    `succeeded amounts agents saw   ${t.agentSeenSucceededMinor} minor units`,
    `ledger invariants              ${brokenInvariants.length === 0 ? `all ${t.invariants.length} hold` : `BROKEN: ${brokenInvariants.map((i) => i.name).join(', ')}`}`,
  ];
  return lines.join('\n');
}

/** The demo's own verdict: exactly one debit per succeeded key and a balanced ledger. */
export function demoHeld(t: DemoTotals): boolean {
  return (
    t.keysDebitedMoreThanOnce === 0 &&
    t.debits === t.succeeded &&
    t.ordersAnswered === t.orders &&
    t.debitedMinor === t.creditedToMerchantMinor &&
    t.debitedMinor === t.agentSeenSucceededMinor &&
    t.invariants.every((i) => i.violations === 0)
  );
}
