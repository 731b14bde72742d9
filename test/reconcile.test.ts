import { describe, expect, it } from 'vitest';
import { createApiKey } from '../src/auth/api-keys.js';
import { noMandate } from '../src/domain/mandate.js';
import { tryHold } from '../src/ledger/charges.js';
import { formatReconcileReport, reconcile, reconcileExitCode, type ReconcileReport } from '../src/reconcile/index.js';
import { RefundRefusedError } from '../src/service/charge-service.js';
import {
  chargeBody,
  expectLedgerInvariants,
  fundedTenant,
  newKey,
  openAccount,
  useHarness,
  waitFor,
  withScratchLedger,
} from './support/harness.js';

const h = useHarness();

function violationsOf(report: ReconcileReport): Record<string, number> {
  return Object.fromEntries(report.checks.filter((c) => c.violations > 0).map((c) => [c.name, c.violations]));
}

describe('reconcile', () => {
  it('passes after a day of every outcome, with counts that add up', async () => {
    const tenant = await fundedTenant(h, { label: 'recon' });
    const c = h.client;
    await c.charge(tenant, newKey('ok'), chargeBody({ amount: 1_000 }));
    const refunded = newKey('refunded');
    await c.charge(tenant, refunded, chargeBody({ amount: 2_000 }));
    await c.refund(tenant, refunded, 'part', { amount: 500 });
    // Refused and recorded as a failed refund: the counts below include it.
    const tooMuch = await c.refund(tenant, refunded, 'too-much', { amount: 5_000 }).then(
      () => null,
      (error: unknown) => error,
    );
    expect(tooMuch).toBeInstanceOf(RefundRefusedError);
    expect((tooMuch as RefundRefusedError).reason).toBe('RefundExceedsRefundable');
    await c.charge(tenant, newKey('declined'), chargeBody({ amount: 50_000 }));
    const cancelled = newKey('cancelled');
    await c.charge(tenant, cancelled, chargeBody({ amount: 700, capture: 'manual' }));
    await c.cancelCharge(tenant, cancelled);
    await c.charge(tenant, newKey('held'), chargeBody({ amount: 300, capture: 'manual' }));

    // Visibility is eventually consistent: wait (with a deadline) until it lists the 4 closed charges.
    const report = await waitFor(
      async () => {
        const r = await reconcile({ ledger: h.pool, temporal: h.temporal, tenant });
        return r.counts.workflowsExamined === 4 ? r : null;
      },
      { what: 'visibility to list the 4 closed charge workflows' },
    );
    const text = formatReconcileReport(report);
    expect(violationsOf(report), text).toEqual({});
    expect(report.ok).toBe(true);
    expect(reconcileExitCode(report)).toBe(0);
    expect(report.counts).toMatchObject({
      accounts: 2,
      charges: 5,
      chargesByStatus: { succeeded: 1, partially_refunded: 1, declined: 1, cancelled: 1, reserved: 1 },
      openHolds: 1,
      heldMinor: 300,
      capturedMinor: 3_000,
      refunds: { succeeded: 1, failed: 1 },
      refundedMinor: 500,
      transfersByKind: { deposit: 1, capture: 2, refund: 1 },
      journalEntries: 8,
      holdsExamined: 1,
      workflowsMatched: 4,
    });
    expect(text).toMatch(/^reconcile OK/);
    expect(text).toContain('4 closed ChargeWorkflow executions compared, 4 match the ledger');

    // The whole ledger, every tenant (the ledger checks only: other tests are running).
    const everything = await reconcile({ ledger: h.pool });
    expect(violationsOf(everything), formatReconcileReport(everything)).toEqual({});
    expect(everything.checks.filter((check) => check.skipped).map((check) => check.name)).toEqual([
      'workflow_outcome_matches_ledger',
      'holds_have_running_workflows',
    ]);
    await c.cancelCharge(tenant, (await c.listCharges(tenant, { status: 'reserved' })).charges[0]!.idempotencyKey);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('covers every closed workflow and every open hold, page by page, and says how many it checked', async () => {
    const tenant = await fundedTenant(h, { label: 'recon-pages', payerMinor: 100_000 });
    const closedCharges = 7;
    for (let i = 0; i < closedCharges; i++) await h.client.charge(tenant, newKey(`closed-${i}`), chargeBody({ amount: 100 + i }));
    const held = [newKey('held-a'), newKey('held-b'), newKey('held-c')];
    for (const key of held) await h.client.charge(tenant, key, chargeBody({ amount: 50, capture: 'manual' }));

    // Page size 2: the closed executions take 4 visibility pages, the open holds 2 ledger pages.
    const report = await waitFor(
      async () => {
        const r = await reconcile({ ledger: h.pool, temporal: h.temporal, tenant, pageSize: 2 });
        return r.counts.workflowsExamined === closedCharges ? r : null;
      },
      { what: `visibility to list the ${closedCharges} closed charge workflows` },
    );
    expect(violationsOf(report), formatReconcileReport(report)).toEqual({});
    expect(report.counts).toMatchObject({ workflowsExamined: closedCharges, workflowsMatched: closedCharges, holdsExamined: held.length });
    expect(formatReconcileReport(report)).toContain(`${closedCharges} closed ChargeWorkflow executions compared, ${closedCharges} match`);
    // A page size larger than everything gives the same counts: nothing depends on the paging.
    const onePage = await reconcile({ ledger: h.pool, temporal: h.temporal, tenant, pageSize: 1_000 });
    expect(onePage.counts.workflowsExamined).toBe(closedCharges);
    expect(onePage.counts.holdsExamined).toBe(held.length);
    for (const key of held) await h.client.cancelCharge(tenant, key);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('fails, with a non-zero exit code, on a ledger with an unbalanced entry, a lost hold and a forgotten charge', async () => {
    // A real charge on the real ledger: its workflow is in Temporal, its row will not be in the scratch ledger.
    const tenant = await fundedTenant(h, { label: 'corrupt', payerMinor: 1_000 });
    expect((await h.client.charge(tenant, newKey('elsewhere'), chargeBody({ amount: 100 }))).charge.status).toBe('succeeded');

    await withScratchLedger(h.pool, async (scratch) => {
      await openAccount(scratch, tenant, 'payer', { depositMinor: 1_000 });
      await openAccount(scratch, tenant, 'payee');
      const clean = await reconcile({ ledger: scratch, tenant });
      expect(violationsOf(clean), formatReconcileReport(clean)).toEqual({});

      // One half of a transfer, written with the triggers off, as a buggy migration or a manual
      // fix could: the balance trigger would have refused it.
      const client = await scratch.connect();
      try {
        await client.query('BEGIN');
        await client.query('SET LOCAL session_replication_role = replica');
        const transfer = await client.query<{ id: number }>(
          `INSERT INTO transfers (tenant, kind, reference, currency, amount_minor)
           VALUES ($1, 'deposit', 'hand-edit', 'USD', 50) RETURNING id`,
          [tenant],
        );
        await client.query(
          'INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES ($1, $2, $3, 50)',
          [transfer.rows[0]!.id, tenant, 'payee'],
        );
        await client.query('UPDATE accounts SET posted_minor = posted_minor + 50 WHERE tenant = $1 AND id = $2', [
          tenant,
          'payee',
        ]);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      // A hold whose workflow never existed, already past its expiry.
      const orphan = h.client.buildIntent(tenant, newKey('orphan'), chargeBody({ amount: 200, capture: 'manual' }));
      await tryHold(scratch, orphan, -1_000);

      const report = await waitFor(
        async () => {
          const r = await reconcile({ ledger: scratch, temporal: h.temporal, tenant, holdGraceMs: 0 });
          return r.counts.workflowsExamined === 1 ? r : null;
        },
        { what: 'visibility to list the closed charge workflow' },
      );
      const text = formatReconcileReport(report);
      expect(report.ok).toBe(false);
      expect(reconcileExitCode(report)).toBe(1);
      expect(violationsOf(report), text).toMatchObject({
        transfer_balanced: 1,
        journal_balanced: 1,
        no_expired_holds: 1,
        holds_have_running_workflows: 1,
        // The real charge's workflow completed, and this ledger has no row for it.
        workflow_outcome_matches_ledger: 1,
      });
      expect(report.checks.find((c) => c.name === 'workflow_outcome_matches_ledger')?.samples[0]).toMatchObject({
        problem: 'the workflow completed but the ledger has no row for its key',
      });
      expect(text).toMatch(/^reconcile FAILED/);
      expect(text).toMatch(/✗ transfer_balanced/);
    });
    await expectLedgerInvariants(h.pool, tenant);
  });
  it('fails on money the ledger would have refused, written straight into the tables: out of a system account, and by keys that could not', async () => {
    const tenant = `t-authority-${newKey('x').slice(-10)}`;
    const other = `t-authority-b-${newKey('x').slice(-10)}`;
    await withScratchLedger(h.pool, async (scratch) => {
      await openAccount(scratch, tenant, 'payer', { depositMinor: 10_000 });
      await openAccount(scratch, tenant, 'payee');
      const admin = (await createApiKey(scratch, tenant, 'admin', 'admin')).record.id;
      const limited = (await createApiKey(scratch, tenant, 'limited', 'agent', { ...noMandate, maxAmountMinor: 1_000, dailyLimitMinor: 1_000 })).record.id;
      const theirs = (await createApiKey(scratch, other, 'theirs', 'admin')).record.id;
      const clean = await reconcile({ ledger: scratch, tenant });
      expect(violationsOf(clean), formatReconcileReport(clean)).toEqual({});

      // As a ledger bug or a hand edit could write them, as the schema owner (balanced, so the
      // journal's own trigger lets them in): each is something a Try or Refund of this version refuses.
      const client = await scratch.connect();
      try {
        await client.query('BEGIN');
        // The limited key existed a day before the charges dated back below.
        await client.query("UPDATE api_keys SET created_at = now() - interval '1 day' WHERE id = $1", [limited]);
        const charge = async (key: string, payer: string, amountMinor: number, keyId: string | null, createdAt = 'now()') => {
          await client.query(
            `INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id, payee_account_id, currency,
                                  amount_minor, capture_mode, hold_state, captured_minor, created_by_key_id, created_at)
             VALUES ($1, $2, 'ch_' || $2, $3, 'o', $4, 'payee', 'USD', $5, 'automatic', 'CONFIRMED', $5, $6, ${createdAt})`,
            [tenant, key, 'a'.repeat(64), payer, amountMinor, keyId],
          );
          const transfer = await client.query<{ id: number }>(
            `INSERT INTO transfers (tenant, kind, reference, currency, amount_minor) VALUES ($1, 'capture', $2, 'USD', $3) RETURNING id`,
            [tenant, key, amountMinor],
          );
          await client.query(
            `INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES ($1, $2, $3, $4), ($1, $2, 'payee', $5)`,
            [transfer.rows[0]!.id, tenant, payer, -amountMinor, amountMinor],
          );
          return transfer.rows[0]!.id;
        };
        // Minted: 10^15 out of @external/USD, under an admin key (above the maximum, and a system payer).
        await charge('minted', '@external/USD', 10 ** 15, admin);
        // 9,999 by a key whose largest charge is 1,000; another tenant's key; and 600 + 600 within a
        // day by a key whose daily limit is 1,000 (the later one is caught).
        await charge('over-max', 'payer', 9_999, limited);
        await charge('their-key', 'payer', 10, theirs);
        await charge('day-1', 'payer', 600, limited, "now() - interval '2 hours'");
        await charge('day-2', 'payer', 600, limited, "now() - interval '1 hour'");
        // A refund with no key at all in a tenant that has keys.
        const refundTransfer = await client.query<{ id: number }>(
          `INSERT INTO transfers (tenant, kind, reference, currency, amount_minor) VALUES ($1, 'refund', 'their-key/r', 'USD', 10) RETURNING id`,
          [tenant],
        );
        await client.query(
          `INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES ($1, $2, 'payee', -10), ($1, $2, 'payer', 10)`,
          [refundTransfer.rows[0]!.id, tenant],
        );
        await client.query(
          `INSERT INTO refunds (tenant, charge_key, refund_key, id, charge_id, currency, fingerprint, amount_minor, status, transfer_id)
           VALUES ($1, 'their-key', 'r', 're_forged', 'ch_their-key', 'USD', $2, 10, 'succeeded', $3)`,
          [tenant, 'b'.repeat(64), refundTransfer.rows[0]!.id],
        );
        await client.query('COMMIT');
      } finally {
        client.release();
      }

      const report = await reconcile({ ledger: scratch, tenant });
      const text = formatReconcileReport(report);
      expect(report.ok).toBe(false);
      expect(violationsOf(report), text).toMatchObject({ system_accounts_move_only_by_deposit: 1, acting_keys_allowed_moves: 5 });
      const samples = report.checks.find((c) => c.name === 'acting_keys_allowed_moves')!.samples as { charge_key: string; refund_key: string | null; problem: string }[];
      expect(Object.fromEntries(samples.map((s) => [s.refund_key ?? s.charge_key, s.problem]))).toEqual({
        minted: "the amount is above the contract's maximum",
        'over-max': "above the key's largest charge",
        'their-key': 'the acting key belongs to another tenant',
        'day-2': "the key's charges in the 24 h up to this one are above its daily limit",
        r: 'no acting key, in a tenant that had keys',
      });
      expect(report.checks.find((c) => c.name === 'system_accounts_move_only_by_deposit')!.samples[0]).toMatchObject({
        account_id: '@external/USD',
        kind: 'capture',
      });
      expect(text).toMatch(/✗ acting_keys_allowed_moves/);
    });
  });
});
