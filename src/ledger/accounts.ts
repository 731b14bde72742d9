import type { LedgerPool } from './pool.js';
import { asLedgerRefusal, LedgerRefusalError } from './errors.js';
import { keysetPage } from './pages.js';

export interface Account {
  tenant: string;
  id: string;
  currency: string;
  allowOverdraft: boolean;
  frozen: boolean;
  postedMinor: number;
  pendingMinor: number;
  availableMinor: number;
  createdAt: string;
}

interface AccountRow {
  tenant: string;
  id: string;
  currency: string;
  allow_overdraft: boolean;
  frozen: boolean;
  posted_minor: number;
  pending_minor: number;
  created_at: Date;
}

function fromRow(row: AccountRow): Account {
  return {
    tenant: row.tenant,
    id: row.id,
    currency: row.currency,
    allowOverdraft: row.allow_overdraft,
    frozen: row.frozen,
    postedMinor: row.posted_minor,
    pendingMinor: row.pending_minor,
    availableMinor: row.posted_minor - row.pending_minor,
    createdAt: row.created_at.toISOString(),
  };
}

export interface NewAccount {
  tenant: string;
  id: string;
  currency: string;
  allowOverdraft: boolean;
}

/**
 * Creates the account, or returns the existing one when the same id was created with the same
 * settings (so a retried create is harmless). `conflict` means the id is taken with other settings.
 */
export async function createAccount(
  pool: LedgerPool,
  account: NewAccount,
): Promise<{ account: Account; created: boolean } | { conflict: Account }> {
  const inserted = await pool.query<AccountRow>(
    `INSERT INTO accounts (tenant, id, currency, allow_overdraft) VALUES ($1, $2, $3, $4)
     ON CONFLICT (tenant, id) DO NOTHING RETURNING *`,
    [account.tenant, account.id, account.currency, account.allowOverdraft],
  );
  if (inserted.rows[0]) return { account: fromRow(inserted.rows[0]), created: true };
  const existing = await getAccount(pool, account.tenant, account.id);
  if (!existing) throw new Error(`account ${account.id} vanished right after a conflicting insert`);
  if (existing.currency !== account.currency || existing.allowOverdraft !== account.allowOverdraft) {
    return { conflict: existing };
  }
  return { account: existing, created: false };
}

/**
 * The account and its balances. System accounts (clearing, external: src/domain/providers.ts) only
 * with `includeSystem`, for admin keys and the operator: every other read treats them as absent.
 */
export async function getAccount(
  pool: LedgerPool,
  tenant: string,
  id: string,
  options: { includeSystem?: boolean } = {},
): Promise<Account | null> {
  const result = await pool.query<AccountRow>(
    // account_balances, not accounts: a balance includes credits not yet folded into the row.
    `SELECT * FROM account_balances WHERE tenant = $1 AND id = $2${options.includeSystem ? '' : ' AND NOT is_system'}`,
    [tenant, id],
  );
  return result.rows[0] ? fromRow(result.rows[0]) : null;
}

/** The account a list cursor names (its id), or null when this tenant's list holds none by that id. */
export async function findAccountCursor(pool: LedgerPool, tenant: string, id: string, options: { includeSystem: boolean }): Promise<string | null> {
  const result = await pool.query<{ id: string }>(
    `SELECT id FROM accounts WHERE tenant = $1 AND id = $2${options.includeSystem ? '' : ' AND NOT is_system'}`,
    [tenant, id],
  );
  return result.rows[0]?.id ?? null;
}

/** The tenant's accounts with their balances, newest first: one page. System accounts only with `includeSystem`. */
export async function listAccounts(
  pool: LedgerPool,
  tenant: string,
  page: { limit: number; includeSystem: boolean; cursor?: { direction: 'after' | 'before'; id: string } | null },
): Promise<{ accounts: Account[]; hasMore: boolean }> {
  const conditions = ['tenant = $1', ...(page.includeSystem ? [] : ['NOT is_system'])];
  const cursor = page.cursor
    ? { direction: page.cursor.direction, row: '(SELECT created_at, id FROM accounts WHERE tenant = $1 AND id = $2)' }
    : null;
  const { rows, hasMore } = await keysetPage<AccountRow>(pool, {
    from: 'account_balances',
    orderBy: ['created_at', 'id'],
    newestFirst: true,
    conditions,
    params: page.cursor ? [tenant, page.cursor.id] : [tenant],
    cursor,
    limit: page.limit,
  });
  return { accounts: rows.map(fromRow), hasMore };
}

/**
 * The currency of each of `ids` that is an account of the tenant (system accounts excluded): what
 * a charge is checked against before it starts. Read from `accounts`, not `account_balances`:
 * existence and currency are columns of the row, and the view would sum every account's unfolded
 * postings for balances nobody reads here.
 */
export async function getAccountCurrencies(pool: LedgerPool, tenant: string, ids: readonly string[]): Promise<Map<string, string>> {
  const result = await pool.query<{ id: string; currency: string }>(
    'SELECT id, currency FROM accounts WHERE tenant = $1 AND id = ANY($2::text[]) AND NOT is_system',
    [tenant, ids],
  );
  return new Map(result.rows.map((row) => [row.id, row.currency]));
}

/** Freezing makes the ledger decline new Trys on the account; holds already made still settle. */
export async function setAccountFrozen(pool: LedgerPool, tenant: string, id: string, frozen: boolean): Promise<boolean> {
  const result = await pool.query('UPDATE accounts SET frozen = $3 WHERE tenant = $1 AND id = $2 AND NOT is_system', [
    tenant,
    id,
    frozen,
  ]);
  return result.rowCount === 1;
}

export interface Deposit {
  transferId: number;
  accountId: string;
  amountMinor: number;
  currency: string;
  createdAt: string;
  replayed: boolean;
}

export class AccountNotFoundError extends Error {
  override readonly name = 'AccountNotFoundError';
}

/** Exactly-once deposit keyed by (tenant, reference). */
export async function deposit(
  pool: LedgerPool,
  tenant: string,
  accountId: string,
  amountMinor: number,
  reference: string,
  /** The API key making it, for the audit (null: the operator). */
  keyId: string | null = null,
): Promise<Deposit> {
  try {
    const result = await pool.query<{
      transfer_id: number;
      account_id: string;
      amount_minor: number;
      currency: string;
      created_at: Date;
      replayed: boolean;
    }>('SELECT * FROM ledger_deposit($1, $2, $3, $4, $5)', [tenant, accountId, amountMinor, reference, keyId]);
    const row = result.rows[0];
    if (!row) throw new Error('ledger_deposit returned no row');
    return {
      transferId: row.transfer_id,
      accountId: row.account_id,
      amountMinor: row.amount_minor,
      currency: row.currency.trim(),
      createdAt: row.created_at.toISOString(),
      replayed: row.replayed,
    };
  } catch (error) {
    if ((error as { code?: string }).code === 'CGN01') throw new AccountNotFoundError((error as Error).message);
    throw asLedgerRefusal(error) ?? error;
  }
}

export { LedgerRefusalError };
