import { describe, expect, it } from 'vitest';
import type pg from 'pg';
import { newKey, newTenant, openAccount, useHarness } from './support/harness.js';

// What the journal refuses, whoever writes it (migration 0140: one statement-level check instead of
// the foreign keys and the deferred balance trigger). Written as the app role, straight into the
// tables, as a buggy function or a manual fix would.

const h = useHarness();

type Client = pg.PoolClient;

/** Hand edits leave nothing behind: the whole test's writes are rolled back (other files check every tenant). */
async function rolledBack(body: (client: Client) => Promise<void>): Promise<void> {
  const client = await h.pool.connect();
  try {
    await client.query('BEGIN');
    await body(client);
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

async function transferFor(client: Client, tenant: string): Promise<number> {
  const { rows } = await client.query<{ id: number }>(
    `INSERT INTO transfers (tenant, kind, reference, currency, amount_minor) VALUES ($1, 'deposit', $2, 'USD', 50) RETURNING id`,
    [tenant, newKey('hand-edit')],
  );
  return rows[0]!.id;
}

/** The statement's refusal; a savepoint keeps the transaction usable after it. */
async function failureOf(client: Client, sql: string, params: unknown[]): Promise<{ code?: string; message: string }> {
  await client.query('SAVEPOINT attempt');
  const error = await client.query(sql, params).then(
    () => null,
    (caught: unknown) => caught as { code?: string; message: string },
  );
  await client.query('ROLLBACK TO SAVEPOINT attempt');
  if (error === null) throw new Error(`expected PostgreSQL to refuse: ${sql}`);
  return error;
}

const insertEntries = `INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor)
                       SELECT $1, $2, unnest($3::text[]), unnest($4::bigint[])`;

describe('the journal refuses', () => {
  it('entries of a transfer that do not sum to zero, or a lone entry', async () => {
    const tenant = newTenant('journal-sum');
    await openAccount(h.pool, tenant, 'a');
    await openAccount(h.pool, tenant, 'b');
    await rolledBack(async (client) => {
      const transfer = await transferFor(client, tenant);
      expect(await failureOf(client, insertEntries, [transfer, tenant, ['a', 'b'], [-50, 49]])).toMatchObject({ code: 'CGJ02' });
      expect(await failureOf(client, insertEntries, [transfer, tenant, ['a'], [50]])).toMatchObject({ code: 'CGJ02' });
      await client.query(insertEntries, [transfer, tenant, ['a', 'b'], [-50, 50]]);
    });
  });

  it('an entry naming an account or a transfer its tenant does not have', async () => {
    const tenant = newTenant('journal-refs');
    const other = newTenant('journal-refs-other');
    await openAccount(h.pool, tenant, 'a');
    await openAccount(h.pool, tenant, 'b');
    await openAccount(h.pool, other, 'a');
    await openAccount(h.pool, other, 'b');
    await rolledBack(async (client) => {
      const transfer = await transferFor(client, tenant);
      expect(await failureOf(client, insertEntries, [transfer, tenant, ['a', 'nobody'], [-50, 50]])).toMatchObject({ code: '23503' });
      expect(await failureOf(client, insertEntries, [transfer, other, ['a', 'b'], [-50, 50]])).toMatchObject({ code: '23503' });
      expect(await failureOf(client, insertEntries, [987_654_321, tenant, ['a', 'b'], [-50, 50]])).toMatchObject({ code: '23503' });
    });
  });

  it('removing an account or changing its key, so what an entry names stays there', async () => {
    const tenant = newTenant('journal-accounts');
    await openAccount(h.pool, tenant, 'a');
    await rolledBack(async (client) => {
      expect(await failureOf(client, 'DELETE FROM accounts WHERE tenant = $1', [tenant])).toMatchObject({ code: 'CGJ01' });
      expect(await failureOf(client, `UPDATE accounts SET id = 'renamed' WHERE tenant = $1`, [tenant])).toMatchObject({ code: 'CGJ01' });
      // Other columns still change as the ledger needs (freezing, balances).
      await client.query('UPDATE accounts SET frozen = true WHERE tenant = $1', [tenant]);
    });
  });
});
