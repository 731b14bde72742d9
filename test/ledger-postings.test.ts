import { describe, expect, it } from 'vitest';
import { confirmHold, tryHold } from '../src/ledger/charges.js';
import { refundCharge } from '../src/ledger/refunds.js';
import { balanceOf, expectLedgerInvariants, ledgerIntent, newKey, newTenant, openAccount, useHarness } from './support/harness.js';

// Migration 1763800000030: Confirm appends its postings (pending_postings) instead of locking the
// payer's and the payee's rows, and whoever debits an account next folds them into the row.
// Balances read through account_balances must be exact at every moment, and so must the
// no-overdraft check.

const h = useHarness();

async function charge(tenant: string, payer: string, payee: string, amountMinor: number): Promise<string> {
  const key = newKey();
  const tried = await tryHold(h.pool, ledgerIntent(tenant, key, payer, payee, amountMinor), 60_000);
  if (tried.holdState === 'TRIED') await confirmHold(h.pool, tenant, key, null);
  return key;
}

async function pendingPostings(tenant: string, account: string): Promise<number> {
  const { rows } = await h.pool.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM pending_postings WHERE tenant = $1 AND account_id = $2',
    [tenant, account],
  );
  return rows[0]!.n;
}

describe('append-only postings (hot payee, hot payer)', () => {
  it('40 concurrent charges to one payee: its balance is exact at once, folded or not', async () => {
    const tenant = newTenant('postings');
    const payers = Array.from({ length: 40 }, (_, i) => `payer-${i}`);
    for (const payer of payers) await openAccount(h.pool, tenant, payer, { depositMinor: 1_000 });
    await openAccount(h.pool, tenant, 'merchant');

    await Promise.all(payers.map((payer) => charge(tenant, payer, 'merchant', 700)));

    expect((await balanceOf(h.pool, tenant, 'merchant')).postedMinor).toBe(40 * 700);
    for (const payer of payers) expect(await balanceOf(h.pool, tenant, payer)).toMatchObject({ postedMinor: 300, pendingMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('a payee whose money is all in unfolded credits can spend exactly that, not a unit more', async () => {
    const tenant = newTenant('postings-spend');
    await openAccount(h.pool, tenant, 'customer', { depositMinor: 5_000 });
    await openAccount(h.pool, tenant, 'shop');
    await openAccount(h.pool, tenant, 'supplier');
    await charge(tenant, 'customer', 'shop', 2_000);
    await charge(tenant, 'customer', 'shop', 1_500);
    expect((await balanceOf(h.pool, tenant, 'shop')).availableMinor).toBe(3_500);

    // One more than the shop has: declined, even though the credits were folded to decide it.
    const tooMuch = newKey();
    const declined = await tryHold(h.pool, ledgerIntent(tenant, tooMuch, 'shop', 'supplier', 3_501), 60_000);
    expect(declined.charge).toMatchObject({ status: 'declined', declineCode: 'insufficient_funds' });
    // Exactly what it has: reserved and captured.
    const exact = newKey();
    expect((await tryHold(h.pool, ledgerIntent(tenant, exact, 'shop', 'supplier', 3_500), 60_000)).holdState).toBe('TRIED');
    await confirmHold(h.pool, tenant, exact, null);
    expect(await balanceOf(h.pool, tenant, 'shop')).toMatchObject({ postedMinor: 0, pendingMinor: 0, availableMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('a refund right after the charge sees the credit it takes back', async () => {
    const tenant = newTenant('postings-refund');
    await openAccount(h.pool, tenant, 'customer-a', { depositMinor: 5_000 });
    await openAccount(h.pool, tenant, 'customer-b', { depositMinor: 5_000 });
    await openAccount(h.pool, tenant, 'shop');
    // The shop starts empty: whatever it can pay back arrived as credits, folded or not.
    const first = await charge(tenant, 'customer-a', 'shop', 3_000);
    await charge(tenant, 'customer-b', 'shop', 1_000);

    const refund = await refundCharge(h.pool, { tenant, chargeKey: first, refundKey: 'r1', refundId: 're_1', fingerprint: 'a'.repeat(64), amountMinor: 3_000 });
    expect(refund.refund).toMatchObject({ status: 'succeeded', amountMinor: 3_000 });
    expect(await pendingPostings(tenant, 'shop')).toBe(0);
    expect((await balanceOf(h.pool, tenant, 'shop')).postedMinor).toBe(1_000);
    expect((await balanceOf(h.pool, tenant, 'customer-a')).postedMinor).toBe(5_000);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('one payer, 40 concurrent charges, some captured in part: what is left is spendable to the unit', async () => {
    const tenant = newTenant('postings-payer');
    await openAccount(h.pool, tenant, 'agent', { depositMinor: 100_000 });
    await openAccount(h.pool, tenant, 'shop');
    const keys = Array.from({ length: 40 }, () => newKey());
    await Promise.all(
      keys.map(async (key, i) => {
        await tryHold(h.pool, ledgerIntent(tenant, key, 'agent', 'shop', 1_000), 60_000);
        // Every fourth charge captures 400 of its 1,000 hold; the other 600 go back to the agent.
        await confirmHold(h.pool, tenant, key, i % 4 === 0 ? 400 : null);
      }),
    );
    const left = 100_000 - 30 * 1_000 - 10 * 400;
    expect(await balanceOf(h.pool, tenant, 'agent')).toMatchObject({ postedMinor: left, pendingMinor: 0, availableMinor: left });
    expect((await balanceOf(h.pool, tenant, 'shop')).postedMinor).toBe(30 * 1_000 + 10 * 400);

    const oneTooMany = await tryHold(h.pool, ledgerIntent(tenant, newKey(), 'agent', 'shop', left + 1), 60_000);
    expect(oneTooMany.charge.declineCode).toBe('insufficient_funds');
    const everything = await tryHold(h.pool, ledgerIntent(tenant, newKey(), 'agent', 'shop', left), 60_000);
    expect(everything.holdState).toBe('TRIED');
    expect(await pendingPostings(tenant, 'agent')).toBe(0);
    expect(await balanceOf(h.pool, tenant, 'agent')).toMatchObject({ postedMinor: left, pendingMinor: left, availableMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
  });
});
