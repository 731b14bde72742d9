import { describe, expect, it } from 'vitest';
import { cancelHold, confirmHold, tryHold } from '../src/ledger/charges.js';
import { balanceOf, expectLedgerInvariants, fundedTenant, ledgerIntent, newKey, useHarness, withScratchLedger } from './support/harness.js';

// The ledger steps are named prepared statements, planned once per connection. A migration that
// changes the charges row makes those plans unusable on every connection that holds them; the
// steps must survive it (drop the connection, run again on a fresh one) instead of failing on
// that connection until the process restarts.

const h = useHarness();

describe('ledger steps as prepared statements', () => {
  it('keep working on the same connection after a migration changes the charges row', async () => {
    await withScratchLedger(
      h.pool,
      async (scratch) => {
        const tenant = await fundedTenant(scratch, { label: 'prepared', payerMinor: 1_000 });
        // One connection: every step below reuses the plans the first ones prepared.
        const before = newKey('before');
        expect((await tryHold(scratch, ledgerIntent(tenant, before, 'payer', 'payee', 100), 60_000)).holdState).toBe('TRIED');
        expect((await confirmHold(scratch, tenant, before, null)).holdState).toBe('CONFIRMED');
        const released = newKey('released');
        expect((await tryHold(scratch, ledgerIntent(tenant, released, 'payer', 'payee', 50), 60_000)).holdState).toBe('TRIED');
        expect((await cancelHold(scratch, ledgerIntent(tenant, released, 'payer', 'payee', 50), 'test')).holdState).toBe('CANCELLED');

        // What a later migration does: the charges row gains a column and the step functions are
        // re-created. Prepared plans of the old row type now fail with SQLSTATE 0A000.
        const migrator = await scratch.connect();
        try {
          await migrator.query("ALTER TABLE charges ADD COLUMN risk_note text NOT NULL DEFAULT ''");
          const { rows } = await migrator.query<{ definition: string }>(
            `SELECT pg_get_functiondef(oid) AS definition FROM pg_proc
              WHERE proname IN ('ledger_try', 'ledger_confirm', 'ledger_cancel')`,
          );
          expect(rows).toHaveLength(3);
          for (const { definition } of rows) await migrator.query(definition);
        } finally {
          migrator.release();
        }

        const after = newKey('after');
        const tried = await tryHold(scratch, ledgerIntent(tenant, after, 'payer', 'payee', 200), 60_000);
        expect(tried.holdState).toBe('TRIED');
        expect((await confirmHold(scratch, tenant, after, null)).holdState).toBe('CONFIRMED');
        const replayed = await tryHold(scratch, ledgerIntent(tenant, after, 'payer', 'payee', 200), 60_000);
        expect(replayed.charge).toEqual((await confirmHold(scratch, tenant, after, null)).charge);
        expect((await cancelHold(scratch, ledgerIntent(tenant, newKey('tombstone'), 'payer', 'payee', 10), 'test')).holdState).toBe('CANCELLED');

        expect((await balanceOf(scratch, tenant, 'payer')).availableMinor).toBe(700);
        expect((await balanceOf(scratch, tenant, 'payee')).postedMinor).toBe(300);
        await expectLedgerInvariants(scratch, tenant);
      },
      { maxConnections: 1 },
    );
  });
});
