import { describe, expect, it } from 'vitest';
import { formatChaosReport } from '../chaos/report.js';
import { verdict } from '../chaos/run.js';
import { newStorm } from '../chaos/storm.js';
import { createApiKey } from '../src/auth/api-keys.js';
import { cancelHold, confirmHold, tryHold } from '../src/ledger/charges.js';
import { noMandate } from '../src/domain/mandate.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import { formatReconcileReport, reconcile, ReconcileTimeoutError, type ReconcileReport } from '../src/reconcile/index.js';
import { exitCodes } from '../src/domain/error-kinds.js';
import { runCli } from './support/cli.js';
import { ledgerIntent, newKey, newTenant, openAccount, useHarness, withScratchLedger } from './support/harness.js';

/**
 * Reconcile's own limits (docs/lifecycle.md, Reconciliation): its ledger checks walk the tables in
 * keyset batches, each statement under reconcileStatementTimeoutMs, and a check that runs out is
 * named; the chaos verdict prints what it has when reconcile does not finish.
 */
const h = useHarness();

function violationsOf(report: ReconcileReport): Record<string, number> {
  return Object.fromEntries(report.checks.filter((c) => c.violations > 0).map((c) => [c.name, c.violations]));
}

/** Holds `table` locked in another session (every statement that reads it waits) until `run` ends. */
async function whileLocked<T>(pool: LedgerPool, table: string, run: () => Promise<T>): Promise<T> {
  const locker = await pool.connect();
  try {
    await locker.query('BEGIN');
    await locker.query(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`);
    return await run();
  } finally {
    await locker.query('ROLLBACK');
    locker.release();
  }
}

/** A tenant with `charges` confirmed charges, made by a key, on `pool`. */
async function ledgerWithCharges(pool: LedgerPool, charges: number): Promise<string> {
  const tenant = newTenant('limits');
  await openAccount(pool, tenant, 'payer', { depositMinor: 1_000_000 });
  await openAccount(pool, tenant, 'payee');
  const actingKeyId = (await createApiKey(pool, tenant, 'agent', 'agent')).record.id;
  for (let i = 0; i < charges; i++) {
    const key = `k-${i}`;
    await tryHold(pool, { ...ledgerIntent(tenant, key, 'payer', 'payee', 100 + i), actingKeyId }, 60_000);
    await confirmHold(pool, tenant, key, null);
  }
  return tenant;
}

describe('reconcile on a ledger it reads in batches', () => {
  it('finds the same things whatever the batch size: every row is read once, a violation in any batch is found', async () => {
    await withScratchLedger(h.pool, async (scratch) => {
      const tenant = await ledgerWithCharges(scratch, 7);
      // Another tenant before and after it in key order: a one-tenant walk stays inside its own keys.
      await ledgerWithCharges(scratch, 2);
      const clean = await reconcile({ ledger: scratch, tenant, batchRows: 2 });
      expect(violationsOf(clean), formatReconcileReport(clean)).toEqual({});
      // A capture transfer written for a charge that does not exist, as a hand edit could (balanced).
      const client = await scratch.connect();
      try {
        await client.query('BEGIN');
        const transfer = await client.query<{ id: number }>(
          `INSERT INTO transfers (tenant, kind, reference, currency, amount_minor) VALUES ($1, 'capture', 'no-such-charge', 'USD', 5) RETURNING id`,
          [tenant],
        );
        await client.query(`INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES ($1, $2, 'payer', -5), ($1, $2, 'payee', 5)`, [
          transfer.rows[0]!.id,
          tenant,
        ]);
        await client.query(`UPDATE accounts SET posted_minor = posted_minor + CASE id WHEN 'payer' THEN -5 ELSE 5 END WHERE tenant = $1 AND id IN ('payer', 'payee')`, [tenant]);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      const found: Record<string, number>[] = [];
      for (const batchRows of [1, 2, 3, 1_000]) {
        const report = await reconcile({ ledger: scratch, tenant, batchRows });
        expect(report.counts.charges).toBe(7);
        found.push(violationsOf(report));
      }
      expect(found[0]).toEqual({ captures_have_charges: 1 });
      for (const other of found) expect(other).toEqual(found[0]);
      // Every tenant at once: the same one finding.
      expect(violationsOf(await reconcile({ ledger: scratch, batchRows: 2 }))).toEqual({ captures_have_charges: 1 });
    });
  });

  it("sums a key's rolling 24 h across batches: the charges above its daily limit are found, and the same ones whatever the batch size", async () => {
    await withScratchLedger(h.pool, async (scratch) => {
      const tenant = newTenant('daily');
      await openAccount(scratch, tenant, 'payer', { depositMinor: 1_000_000 });
      await openAccount(scratch, tenant, 'payee');
      // Made under a mandate that lets every Try through; the limit lowered afterwards (below), as
      // a hand edit or a Try of an older version could leave it, is what reconcile must catch.
      const limited = (await createApiKey(scratch, tenant, 'limited', 'agent', { ...noMandate, dailyLimitMinor: 1_000_000 })).record.id;
      const other = (await createApiKey(scratch, tenant, 'other', 'agent')).record.id;
      // Hours before now, amount, key, and whether the hold is released (a cancelled charge holds nothing, so it adds nothing).
      const charges: [string, number, number, string, 'confirm' | 'hold' | 'cancel'][] = [
        ['old', 30, 900, limited, 'confirm'], // more than 24 h before every other one: never in their day
        ['a', 5, 400, limited, 'confirm'],
        ['other-1', 4.5, 5_000, other, 'confirm'],
        ['b', 4, 300, limited, 'hold'], // held, not captured: it counts
        ['released', 3.5, 500, limited, 'cancel'],
        ['c', 3, 200, limited, 'confirm'], // 900 in its day
        ['d', 2, 200, limited, 'confirm'], // 1,100: above
        ['other-2', 1.5, 5_000, other, 'confirm'],
        ['e', 1, 100, limited, 'confirm'], // 1,200: above
      ];
      for (const [key, , amountMinor, actingKeyId, end] of charges) {
        const intent = { ...ledgerIntent(tenant, key, 'payer', 'payee', amountMinor), actingKeyId };
        await tryHold(scratch, intent, 60_000);
        if (end === 'confirm') await confirmHold(scratch, tenant, key, null);
        if (end === 'cancel') await cancelHold(scratch, intent, 'requested_by_caller');
      }
      const clean = await reconcile({ ledger: scratch, tenant, batchRows: 2 });
      expect(violationsOf(clean), formatReconcileReport(clean)).toEqual({});
      for (const [key, hoursAgo] of charges) {
        await scratch.query(`UPDATE charges SET created_at = now() - $3 * interval '1 hour' WHERE tenant = $1 AND idempotency_key = $2`, [tenant, key, hoursAgo]);
      }
      await scratch.query(`UPDATE api_keys SET created_at = now() - interval '2 days' WHERE id = ANY($1)`, [[limited, other]]);
      await scratch.query(`UPDATE api_keys SET daily_limit_minor = 1000 WHERE id = $1`, [limited]);

      for (const batchRows of [1, 2, 3, 1_000]) {
        const report = await reconcile({ ledger: scratch, tenant, batchRows });
        expect(violationsOf(report), `batchRows ${batchRows}: ${formatReconcileReport(report)}`).toEqual({ acting_keys_allowed_moves: 2 });
        const samples = report.checks.find((c) => c.name === 'acting_keys_allowed_moves')!.samples as { charge_key: string; key_id: string; problem: string }[];
        expect(samples.map((sample) => [sample.charge_key, sample.key_id, sample.problem])).toEqual([
          ['d', limited, "the key's charges in the 24 h up to this one are above its daily limit"],
          ['e', limited, "the key's charges in the 24 h up to this one are above its daily limit"],
        ]);
      }
      // Every tenant at once: the same two.
      expect(violationsOf(await reconcile({ ledger: scratch, batchRows: 2 }))).toEqual({ acting_keys_allowed_moves: 2 });
    });
  });

  it('stops with an error naming the check whose statement ran past reconcileStatementTimeoutMs, and refuses a limit out of range', async () => {
    await withScratchLedger(h.pool, async (scratch) => {
      const tenant = await ledgerWithCharges(scratch, 2);
      const started = Date.now();
      const error = await whileLocked(scratch, 'api_keys', () => reconcile({ ledger: scratch, tenant, reconcileStatementTimeoutMs: 300 }).catch((e: unknown) => e));
      expect(error).toBeInstanceOf(ReconcileTimeoutError);
      expect((error as ReconcileTimeoutError).check).toBe('acting_keys_allowed_moves');
      expect((error as Error).message).toMatch(
        /^reconcile did not finish: check acting_keys_allowed_moves ran past reconcileStatementTimeoutMs \(300 ms\) on one statement \(canceling statement due to statement timeout\)/,
      );
      // Its own limit, not the pool's 10 s.
      expect(Date.now() - started).toBeLessThan(9_000);

      const first = await whileLocked(scratch, 'transfers', () => reconcile({ ledger: scratch, tenant, reconcileStatementTimeoutMs: 300 }).catch((e: unknown) => e));
      expect((first as ReconcileTimeoutError).check).toBe('transfer_balanced');
      // The connection went back to the pool usable: the next run is clean.
      expect(violationsOf(await reconcile({ ledger: scratch, tenant }))).toEqual({});
      await expect(reconcile({ ledger: scratch, tenant, reconcileStatementTimeoutMs: 0 })).rejects.toThrow('reconcileStatementTimeoutMs must be a whole number of ms from 1 to 3600000');
    });
  });

  it('the command takes --statement-timeout-ms and names the flag when it is out of range', async () => {
    const bad = await runCli(['reconcile', '--statement-timeout-ms', '0']);
    expect(bad.code).toBe(exitCodes.invalid);
    expect(bad.stderr).toContain('--statement-timeout-ms must be a whole number of ms from 1 to 3600000');
    const withProvider = await runCli(['reconcile', '--provider', 'stripe', '--statement-timeout-ms', '5000']);
    expect(withProvider.code).toBe(exitCodes.invalid);
    expect(withProvider.stderr).toContain('--statement-timeout-ms is for the ledger checks');
  });

  it('the chaos verdict prints what it has, with the reconcile error named, when reconcile does not finish', async () => {
    await withScratchLedger(h.pool, async (scratch) => {
      const tenant = await ledgerWithCharges(scratch, 2);
      const result = await whileLocked(scratch, 'api_keys', () =>
        verdict({
          pool: scratch,
          temporal: h.temporal,
          tenant,
          storm: newStorm(),
          faults: [],
          undecided: [],
          durationMs: 1_000,
          temporalKind: 'dev server',
          singleFaults: [],
          mode: 'storm',
          settings: 'current',
          provider: null,
          reconcileStatementTimeoutMs: 300,
        }),
      );
      expect(result.ok).toBe(false);
      expect(result.reconcileOk).toBe(false);
      expect(result.reconcileError).toMatch(/^reconcile did not finish: check acting_keys_allowed_moves ran past reconcileStatementTimeoutMs \(300 ms\)/);
      // What the other readings found is still there.
      expect(result.keysDebitedTwice).toBe(0);
      expect(result.openHolds).toBe(0);
      expect(result.brokenInvariants).toEqual({});
      expect(result.problems).toContain(result.reconcileError);
      const report = formatChaosReport(result);
      expect(report).toContain('| reconcile | FAILED: reconcile did not finish: check acting_keys_allowed_moves');
      expect(report).toContain('| keys debited twice | 0 |');
    });
  });
});
