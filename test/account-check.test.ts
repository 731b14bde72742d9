import { WorkflowNotFoundError } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { getAccountCurrencies, setAccountFrozen } from '../src/ledger/accounts.js';
import { countLedger } from '../src/ledger/reports.js';
import { ValidationError } from '../src/domain/errors.js';
import { chargeBody, newKey, newTenant, openAccount, useHarness } from './support/harness.js';

// The check a new charge passes before anything starts (start-or-attach.ts, assertAccountsUsable):
// it reads the accounts table, not the balances view, so what it may answer is pinned here.

const h = useHarness();

describe('the account check before a charge starts', () => {
  it('getAccountCurrencies: the tenant\'s own accounts with their currency; unknown, system and other tenants\' ids absent', async () => {
    const tenant = newTenant('currencies');
    const other = newTenant('currencies-other');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 500 }); // the deposit opens @external/USD, a system account
    await openAccount(h.pool, tenant, 'payee-eur', { currency: 'EUR' });
    await openAccount(h.pool, tenant, 'frozen');
    await setAccountFrozen(h.pool, tenant, 'frozen', true);
    await openAccount(h.pool, other, 'elsewhere');
    const currencies = await getAccountCurrencies(h.pool, tenant, ['payer', 'payee-eur', 'frozen', 'nobody', '@external/USD', 'elsewhere']);
    // A frozen account is still named: the ledger's Try declines it, as it does for one frozen
    // after the check.
    expect(Object.fromEntries(currencies)).toEqual({ payer: 'USD', 'payee-eur': 'EUR', frozen: 'USD' });
  });

  it('an unknown payer and a payee in another currency: both refused by field in one answer, and nothing starts', async () => {
    const tenant = newTenant('check');
    await openAccount(h.pool, tenant, 'payee-eur', { currency: 'EUR' });
    const key = newKey();
    const error = await h.client
      .charge(tenant, key, chargeBody({ payer_account_id: 'nobody', payee_account_id: 'payee-eur' }))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).errors).toEqual([
      { field: 'payer_account_id', message: 'no account nobody for this tenant' },
      { field: 'currency', message: 'account payee-eur holds EUR, not USD' },
    ]);
    await expect(h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
    expect((await countLedger(h.pool, tenant)).charges).toBe(0);
  });
});
