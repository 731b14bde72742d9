import { encryptedInputArgs } from './support/temporal-cli.js';
import { testPayloadProtection } from './support/harness.js';
/**
 * The ledger decides from its own tables, never from the caller's word (docs/back-door.md, "The
 * ledger decides from its own tables"). Anyone who can reach Temporal can start a ChargeWorkflow or
 * a RefundWorkflow with a self-consistent input (the fingerprint is a hash, not a signature), and
 * the ledger's functions are what then stands between that input and the money: these tests forge
 * inputs through the real `temporal` binary and through SQL as the app role, and check that no
 * forgery moves money and every one is answered by a refusal.
 */
import { execFile } from 'node:child_process';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, inject, it } from 'vitest';
import { createApiKey } from '../src/auth/api-keys.js';
import { chargeWorkflowId, type ChargeIntent, type ChargeRequest } from '../src/domain/charge.js';
import { noMandate, type Mandate } from '../src/domain/mandate.js';
import { refundWorkflowId, type Refund, type RefundIntent } from '../src/domain/refund.js';
import { chargeFingerprint, chargeIdFor } from '../src/domain/request-fingerprint.js';
import { ledgerRefusals } from '../src/domain/refusals.js';
import { revokeApiKey } from '../src/ledger/api-keys.js';
import { cancelHold, confirmHold, tryHold } from '../src/ledger/charges.js';
import { LedgerRefusalError } from '../src/ledger/errors.js';
import { refundCharge } from '../src/ledger/refunds.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import { refundFingerprint, refundIdFor } from '../src/service/intent.js';
import { resolveTemporalCliPath } from '../src/stack/temporal-cli.js';
import { chargeTaskQueue, refundWorkflowType, type ChargeWorkflowInput, type RefundWorkflowInput } from '../workflows/definitions.js';
import {
  balanceOf,
  expectLedgerInvariants,
  fundedTenant,
  newKey,
  openAccount,
  testPolicy,
  useHarness,
  waitFor,
  withScratchLedger,
} from './support/harness.js';

const h = useHarness();

/** The contract's maximum amount (docs/limits.md), which the ledger holds every step to. */
const amountMinorMax = 1_000_000_000_000;

/** A charge request as the service would validate it, but built by hand: nothing bounds its values. */
function forgedRequest(overrides: Partial<ChargeRequest> = {}): ChargeRequest {
  return {
    orderId: `order-${newKey('forged')}`,
    payerAccountId: 'payer',
    payeeAccountId: 'payee',
    amountMinor: 1_000,
    currency: 'USD',
    captureMode: 'automatic',
    description: null,
    metadata: null,
    ...overrides,
  };
}

/** Self-consistent, as the probe built them: the id, charge id and fingerprint the workflow re-derives all agree. */
function forgedIntent(tenant: string, request: ChargeRequest, claims: Pick<ChargeIntent, 'actingKeyId' | 'dailyLimitMinor'> = {}): ChargeIntent {
  const key = newKey('forged');
  return { tenant, idempotencyKey: key, chargeId: chargeIdFor(tenant, key), fingerprint: chargeFingerprint(request), request, ...claims };
}

async function keyOf(tenant: string, role: 'agent' | 'admin', mandate: Partial<Mandate> = {}): Promise<string> {
  return (await createApiKey(h.pool, tenant, `${role} key`, role, { ...noMandate, ...mandate })).record.id;
}

/** Everything a forgery must leave as it was: balances (system accounts included), transfers, journal, refunds, holds. */
async function moneyFootprint(pool: LedgerPool, tenant: string) {
  const result = await pool.query(
    `SELECT (SELECT json_agg(json_build_array(id, posted_minor, pending_minor) ORDER BY id) FROM account_balances WHERE tenant = $1) AS balances,
            (SELECT count(*)::int FROM transfers WHERE tenant = $1) AS transfers,
            (SELECT count(*)::int FROM journal_entries WHERE tenant = $1) AS entries,
            (SELECT count(*)::int FROM refunds WHERE tenant = $1) AS refunds,
            (SELECT count(*)::int FROM charges WHERE tenant = $1 AND hold_state IN ('TRIED', 'CONFIRMED')) AS moving_charges`,
    [tenant],
  );
  return result.rows[0] as Record<string, unknown>;
}

/** The real `temporal` binary against the test stack: `workflow execute` of a workflow type on the charges queue. */
function executeByHand(type: string, workflowId: string, input: unknown): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    execFile(
      resolveTemporalCliPath(),
      ['workflow', 'execute', '--type', type, '--workflow-id', workflowId, '--task-queue', chargeTaskQueue,
        // Encrypted under the deployment's key: what the ledger must refuse is a forger who has it.
        ...encryptedInputArgs(input, testPayloadProtection().ring!.current), '--address', inject('stack').temporalAddress],
      { timeout: 60_000 },
      (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, output: `${stdout}\n${stderr}` }),
    );
  });
}

/** The failure types along the cause chain an execution failed with (workflow, activity, application). */
async function failureTypesOf(workflowId: string): Promise<string[]> {
  const error = await h.temporal.workflow.getHandle(workflowId).result().then(() => null, (e: unknown) => e);
  expect(error).toBeInstanceOf(WorkflowFailedError);
  const types: string[] = [];
  for (let cause = (error as WorkflowFailedError).cause; cause; cause = (cause as Error).cause as Error | undefined) {
    if (cause instanceof ApplicationFailure && cause.type) types.push(cause.type);
  }
  return types;
}

async function expectRefundRefused(run: Promise<unknown>): Promise<void> {
  const error = await run.then(() => null, (e: unknown) => e);
  expect(error).toBeInstanceOf(LedgerRefusalError);
  expect((error as LedgerRefusalError).refusal).toBe('refundNotAuthorized');
}

/** A tenant with an agent key and a charge of 3,000 that key made and captured. */
async function capturedCharge(label: string): Promise<{ tenant: string; agent: string; chargeKey: string }> {
  const tenant = await fundedTenant(h, { label, payerMinor: 10_000 });
  const agent = await keyOf(tenant, 'agent');
  const intent = { ...forgedIntent(tenant, forgedRequest({ amountMinor: 3_000 })), actingKeyId: agent };
  expect((await tryHold(h.pool, intent, 60_000)).holdState).toBe('TRIED');
  expect((await confirmHold(h.pool, tenant, intent.idempotencyKey, null)).holdState).toBe('CONFIRMED');
  return { tenant, agent, chargeKey: intent.idempotencyKey };
}

function refundIntent(tenant: string, chargeKey: string, actingKeyId?: string): RefundIntent {
  const refundKey = newKey('refund');
  return {
    tenant,
    chargeKey,
    refundKey,
    refundId: refundIdFor(tenant, chargeKey, refundKey),
    fingerprint: refundFingerprint(null),
    amountMinor: null,
    ...(actingKeyId !== undefined ? { actingKeyId } : {}),
  };
}

describe('Try called directly with forged arguments (SQL as the app role)', () => {
  it('a system account as payer or payee is declined unknown_account, even for an unlimited admin key; nothing moves', async () => {
    const tenant = await fundedTenant(h, { label: 'sys-payer' });
    const admin = await keyOf(tenant, 'admin');
    const before = await moneyFootprint(h.pool, tenant);
    for (const accounts of [{ payerAccountId: '@external/USD' }, { payeeAccountId: '@external/USD' }]) {
      const intent = forgedIntent(tenant, forgedRequest({ ...accounts, amountMinor: 1_000 }), { actingKeyId: admin });
      const row = await tryHold(h.pool, intent, 60_000);
      expect(row.charge, JSON.stringify(accounts)).toMatchObject({ status: 'declined', declineCode: 'unknown_account' });
      // Repeated, the first decision answers.
      expect((await tryHold(h.pool, intent, 60_000)).charge.declineCode).toBe('unknown_account');
      await expect(confirmHold(h.pool, tenant, intent.idempotencyKey, null)).rejects.toMatchObject({ refusal: 'holdDeclined' });
    }
    expect(await moneyFootprint(h.pool, tenant)).toEqual(before);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('an amount above 10^12 is declined amount_too_large whatever the caller claims; 10^12 itself is judged on funds', async () => {
    const tenant = await fundedTenant(h, { label: 'too-large' });
    await openAccount(h.pool, tenant, 'overdraft', { allowOverdraft: true });
    const before = await moneyFootprint(h.pool, tenant);
    for (const amountMinor of [amountMinorMax + 1, 5 * amountMinorMax, 10 ** 15]) {
      const row = await tryHold(h.pool, forgedIntent(tenant, forgedRequest({ payerAccountId: 'overdraft', amountMinor })), 60_000);
      expect(row.charge, String(amountMinor)).toMatchObject({ status: 'declined', declineCode: 'amount_too_large' });
    }
    expect(await moneyFootprint(h.pool, tenant)).toEqual(before);
    const atMax = await tryHold(h.pool, forgedIntent(tenant, forgedRequest({ amountMinor: amountMinorMax })), 60_000);
    expect(atMax.charge.declineCode).toBe('insufficient_funds');
  });

  it("the key's mandate is read from its row: an intent claiming a larger daily limit, or hiding it, gets mandate_exceeded", async () => {
    const tenant = await fundedTenant(h, { label: 'mandate', payerMinor: 100_000 });
    await openAccount(h.pool, tenant, 'elsewhere');
    const agent = await keyOf(tenant, 'agent', { maxAmountMinor: 1_000, dailyLimitMinor: 1_000, allowedPayeeAccountIds: ['payee'], currency: 'USD' });
    const spend = forgedIntent(tenant, forgedRequest({ amountMinor: 1_000 }), { actingKeyId: agent, dailyLimitMinor: 1_000 });
    expect((await tryHold(h.pool, spend, 60_000)).holdState).toBe('TRIED');
    expect((await confirmHold(h.pool, tenant, spend.idempotencyKey, null)).holdState).toBe('CONFIRMED');
    const before = await moneyFootprint(h.pool, tenant);

    const forgeries: [string, ChargeIntent][] = [
      ['9,999 claiming a limit of 10^9', forgedIntent(tenant, forgedRequest({ amountMinor: 9_999 }), { actingKeyId: agent, dailyLimitMinor: 1_000_000_000 })],
      ['9,999 hiding the limit', forgedIntent(tenant, forgedRequest({ amountMinor: 9_999 }), { actingKeyId: agent })],
      ['1 over a used-up daily limit, hiding it', forgedIntent(tenant, forgedRequest({ amountMinor: 1 }), { actingKeyId: agent })],
      ['to a payee outside the mandate', forgedIntent(tenant, forgedRequest({ amountMinor: 1, payeeAccountId: 'elsewhere' }), { actingKeyId: agent })],
    ];
    for (const [what, intent] of forgeries) {
      expect((await tryHold(h.pool, intent, 60_000)).charge, what).toMatchObject({ status: 'declined', declineCode: 'mandate_exceeded' });
    }
    expect(await moneyFootprint(h.pool, tenant)).toEqual(before);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it("an unknown key, another tenant's, a revoked or expired one, and no key where the tenant has keys: key_not_authorized", async () => {
    const tenant = await fundedTenant(h, { label: 'keys' });
    const other = await fundedTenant(h, { label: 'keys-other' });
    const own = await keyOf(tenant, 'agent');
    const revoked = await keyOf(tenant, 'agent');
    await revokeApiKey(h.pool, revoked);
    const expiring = await keyOf(tenant, 'agent', { expiresAt: new Date(Date.now() + 1_500).toISOString() });
    const theirs = await keyOf(other, 'admin');
    // Held before its key is revoked: the repeated Try answers the first decision.
    const held = forgedIntent(tenant, forgedRequest({ amountMinor: 100 }), { actingKeyId: own });
    expect((await tryHold(h.pool, held, 60_000)).holdState).toBe('TRIED');
    await revokeApiKey(h.pool, own);
    expect((await tryHold(h.pool, held, 60_000)).holdState).toBe('TRIED');
    // Expiry is the key row's, compared with the database's clock.
    await waitFor(
      async () => (await h.pool.query<{ past: boolean }>('SELECT now() >= expires_at AS past FROM api_keys WHERE id = $1', [expiring])).rows[0]!.past,
      { what: "the database's clock to pass the key's expiry" },
    );
    const before = await moneyFootprint(h.pool, tenant);

    const forgeries: [string, string | undefined][] = [
      ['an unknown key', 'key_0000000000000000'],
      ["tenant b's admin key", theirs],
      ['a revoked key', revoked],
      ['a key revoked after its first charge', own],
      ['an expired key', expiring],
      ['no key, in a tenant that has keys', undefined],
    ];
    for (const [what, actingKeyId] of forgeries) {
      const intent = forgedIntent(tenant, forgedRequest({ amountMinor: 100 }), actingKeyId === undefined ? {} : { actingKeyId });
      expect((await tryHold(h.pool, intent, 60_000)).charge, what).toMatchObject({ status: 'declined', declineCode: 'key_not_authorized' });
    }
    expect(await moneyFootprint(h.pool, tenant)).toEqual(before);
    // A tenant that never had a key is the operator's (the command line, the demo): no key needed.
    const operated = await fundedTenant(h, { label: 'operator' });
    expect((await tryHold(h.pool, forgedIntent(operated, forgedRequest({ amountMinor: 100 })), 60_000)).holdState).toBe('TRIED');
  });

  it('the raw SQL functions, single and batch, ignore a daily limit passed in', async () => {
    const tenant = await fundedTenant(h, { label: 'raw-sql', payerMinor: 100_000 });
    const agent = await keyOf(tenant, 'agent', { dailyLimitMinor: 500 });
    const before = await moneyFootprint(h.pool, tenant);
    const single = await h.pool.query<{ hold_state: string; decline_code: string }>(
      `SELECT * FROM ledger_try($1, $2, $3, $4, 'o', 'payer', 'payee', 'USD', 9999, 'automatic', NULL, NULL, 60000, $5, 1000000000)`,
      [tenant, 'raw-1', chargeIdFor(tenant, 'raw-1'), 'f'.repeat(64), agent],
    );
    expect(single.rows[0]).toMatchObject({ hold_state: 'DECLINED', decline_code: 'mandate_exceeded' });
    const batch = await h.pool.query<{ idempotency_key: string; decline_code: string }>(
      `SELECT * FROM ledger_try_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
      [[tenant, tenant], ['raw-2', 'raw-3'], [chargeIdFor(tenant, 'raw-2'), chargeIdFor(tenant, 'raw-3')], ['a'.repeat(64), 'b'.repeat(64)],
        ['o', 'o'], ['@external/USD', 'payer'], ['payee', 'payee'], ['USD', 'USD'], [100, amountMinorMax * 5], ['automatic', 'automatic'],
        [null, null], [null, null], [60_000, 60_000], [agent, agent], [10 ** 12, 10 ** 12]],
    );
    expect(Object.fromEntries(batch.rows.map((r) => [r.idempotency_key, r.decline_code]))).toEqual({ 'raw-2': 'unknown_account', 'raw-3': 'amount_too_large' });
    const refund = await h.pool
      .query(`SELECT * FROM ledger_refund($1, 'raw-1', 'r', $2, $3, NULL, NULL)`, [tenant, refundIdFor(tenant, 'raw-1', 'r'), 'c'.repeat(64)])
      .then(() => null, (e: { code?: string }) => e.code);
    expect(refund).toBe(ledgerRefusals.refundNotAuthorized.sqlState);
    expect(await moneyFootprint(h.pool, tenant)).toEqual(before);
  });
});

describe('Confirm of a hold reserved before these rules', () => {
  it('a hold above 10^12 is refused ChargeNotAllowed, never captured; Cancel releases it', async () => {
    await withScratchLedger(h.pool, async (scratch) => {
      const tenant = await fundedTenant(scratch, { label: 'old-hold' });
      await openAccount(scratch, tenant, 'overdraft', { allowOverdraft: true });
      const intent = forgedIntent(tenant, forgedRequest({ payerAccountId: 'overdraft', amountMinor: 5 * amountMinorMax }));
      // As an older Try reserved it (the scratch ledger's owner writes the row and the hold).
      await scratch.query(
        `INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id, payee_account_id, currency,
                              amount_minor, capture_mode, hold_state, held_minor)
         VALUES ($1, $2, $3, $4, $5, 'overdraft', 'payee', 'USD', $6, 'automatic', 'TRIED', $6)`,
        [tenant, intent.idempotencyKey, intent.chargeId, intent.fingerprint, intent.request.orderId, intent.request.amountMinor],
      );
      await scratch.query(`UPDATE accounts SET pending_minor = pending_minor + $3 WHERE tenant = $1 AND id = $2`, [tenant, 'overdraft', intent.request.amountMinor]);
      const before = await moneyFootprint(scratch, tenant);
      const refused = await confirmHold(scratch, tenant, intent.idempotencyKey, null).then(() => null, (e: unknown) => e);
      expect(refused).toBeInstanceOf(LedgerRefusalError);
      expect((refused as LedgerRefusalError).refusal).toBe('chargeNotAllowed');
      expect(await moneyFootprint(scratch, tenant)).toEqual(before);
      expect((await cancelHold(scratch, intent, 'confirm_failed')).holdState).toBe('CANCELLED');
      expect((await balanceOf(scratch, tenant, 'overdraft')).pendingMinor).toBe(0);
    });
  });
});

describe("a key's daily limit under concurrency", () => {
  it('two concurrent Trys that together exceed the limit: exactly one holds, the other is declined mandate_exceeded', async () => {
    for (const hint of [true, false]) {
      const tenant = await fundedTenant(h, { label: 'daily-race', payerMinor: 100_000 });
      const agent = await keyOf(tenant, 'agent', { dailyLimitMinor: 1_000 });
      // With the hint each Try runs alone; without it they may share a batch: the answer is the same.
      const claims = hint ? { actingKeyId: agent, dailyLimitMinor: 1_000 } : { actingKeyId: agent };
      const intents = [0, 1].map(() => forgedIntent(tenant, forgedRequest({ amountMinor: 600 }), claims));
      const rows = await Promise.all(intents.map((intent) => tryHold(h.pool, intent, 60_000)));
      expect(rows.map((row) => row.charge.declineCode ?? row.holdState).sort(), `hint ${hint}`).toEqual(['TRIED', 'mandate_exceeded']);
      const payer = await h.pool.query<{ pending: string }>('SELECT pending_minor::text AS pending FROM accounts WHERE tenant = $1 AND id = $2', [tenant, 'payer']);
      expect(payer.rows[0]!.pending).toBe('600');
    }
  });
});

describe('refunds called directly with forged arguments', () => {
  it("no key, tenant b's key, an unknown or revoked key: RefundNotAuthorized, nothing recorded; the charge's own key refunds", async () => {
    const { tenant, agent, chargeKey } = await capturedCharge('refund-forged');
    const other = await fundedTenant(h, { label: 'refund-other' });
    const theirs = await keyOf(other, 'admin');
    const revoked = await keyOf(tenant, 'admin');
    await revokeApiKey(h.pool, revoked);
    const before = await moneyFootprint(h.pool, tenant);
    for (const actingKeyId of [undefined, theirs, 'key_0000000000000000', revoked]) {
      await expectRefundRefused(refundCharge(h.pool, refundIntent(tenant, chargeKey, actingKeyId)));
    }
    expect(await moneyFootprint(h.pool, tenant)).toEqual(before);
    const genuine = await refundCharge(h.pool, refundIntent(tenant, chargeKey, agent));
    expect(genuine.refund).toMatchObject({ status: 'succeeded', amountMinor: 3_000, createdByKeyId: agent });
    await expectLedgerInvariants(h.pool, tenant);
  });
});

describe('workflows started by hand with the temporal CLI, with self-consistent inputs', () => {
  async function chargeByHand(intent: ChargeIntent): Promise<Record<string, unknown>> {
    const workflowId = chargeWorkflowId(intent.tenant, intent.idempotencyKey);
    const run = await executeByHand('ChargeWorkflow', workflowId, { intent, policy: testPolicy } satisfies ChargeWorkflowInput);
    expect(run.code, run.output).toBe(0);
    return (await h.temporal.workflow.getHandle(workflowId).result()) as Record<string, unknown>;
  }

  it('@external/USD paying 10^15, 5×10^12 between ordinary accounts, and 9,999 on a used-up 1,000 mandate: each declined, no money moves', async () => {
    const tenant = await fundedTenant(h, { label: 'by-hand', payerMinor: 100_000 });
    await openAccount(h.pool, tenant, 'overdraft', { allowOverdraft: true });
    const admin = await keyOf(tenant, 'admin');
    const limited = await keyOf(tenant, 'agent', { maxAmountMinor: 1_000, dailyLimitMinor: 1_000 });
    const spend = forgedIntent(tenant, forgedRequest({ amountMinor: 1_000 }), { actingKeyId: limited, dailyLimitMinor: 1_000 });
    expect((await chargeByHand(spend)).status).toBe('succeeded');
    const before = await moneyFootprint(h.pool, tenant);

    const minted = await chargeByHand(forgedIntent(tenant, forgedRequest({ payerAccountId: '@external/USD', amountMinor: 10 ** 15 }), { actingKeyId: admin }));
    expect(minted).toMatchObject({ status: 'declined', declineCode: 'amount_too_large' });
    const fromSystem = await chargeByHand(forgedIntent(tenant, forgedRequest({ payerAccountId: '@external/USD', amountMinor: 10_000 }), { actingKeyId: admin }));
    expect(fromSystem).toMatchObject({ status: 'declined', declineCode: 'unknown_account' });
    const large = await chargeByHand(forgedIntent(tenant, forgedRequest({ payerAccountId: 'overdraft', amountMinor: 5 * amountMinorMax }), { actingKeyId: admin }));
    expect(large).toMatchObject({ status: 'declined', declineCode: 'amount_too_large' });
    const overMandate = await chargeByHand(
      forgedIntent(tenant, forgedRequest({ amountMinor: 9_999 }), { actingKeyId: limited, dailyLimitMinor: 1_000_000_000 }),
    );
    expect(overMandate).toMatchObject({ status: 'declined', declineCode: 'mandate_exceeded' });
    const keyless = await chargeByHand(forgedIntent(tenant, forgedRequest({ amountMinor: 10 })));
    expect(keyless).toMatchObject({ status: 'declined', declineCode: 'key_not_authorized' });

    expect(await moneyFootprint(h.pool, tenant)).toEqual(before);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it("a RefundWorkflow of tenant a's charge with no key or tenant b's key fails RefundNotAuthorized; the money stays", async () => {
    const { tenant, chargeKey } = await capturedCharge('refund-by-hand');
    const other = await fundedTenant(h, { label: 'refund-by-hand-b' });
    const theirs = await keyOf(other, 'agent');
    const before = await moneyFootprint(h.pool, tenant);
    for (const actingKeyId of [undefined, theirs]) {
      const intent = refundIntent(tenant, chargeKey, actingKeyId);
      const pending: Refund = {
        id: intent.refundId, tenant, chargeKey, chargeId: chargeIdFor(tenant, chargeKey), refundKey: intent.refundKey,
        amountMinor: null, requestedAmountMinor: null, currency: 'USD', status: 'pending', failureCode: null, createdAt: new Date().toISOString(),
      };
      const workflowId = refundWorkflowId(tenant, chargeKey, intent.refundKey);
      const run = await executeByHand(refundWorkflowType, workflowId, { intent, pending, policy: { activityStartToCloseMs: 5_000 } } satisfies RefundWorkflowInput);
      expect(run.code).not.toBe(0);
      expect(await failureTypesOf(workflowId)).toEqual([ledgerRefusals.refundNotAuthorized.type]);
    }
    expect(await moneyFootprint(h.pool, tenant)).toEqual(before);
  });
});
