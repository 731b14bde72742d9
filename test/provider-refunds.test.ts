/**
 * Refunding a provider charge refunds it at the provider too, exactly once (docs/providers.md,
 * Refunds): the refund activity against the real ledger and the Stripe simulator, through the
 * official Stripe SDK, with the faults that lose the provider's answer after it refunded.
 */
import { ApplicationFailure } from '@temporalio/common';
import { NativeConnection } from '@temporalio/worker';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { createRefundActivities, providerRefundFailureTypes, type RefundActivityHooks } from '../activities/refund-activities.js';
import type { ChargeIntent } from '../src/domain/charge.js';
import { clearingAccountId } from '../src/domain/providers.js';
import type { RefundIntent } from '../src/domain/refund.js';
import { confirmHold, tryHold } from '../src/ledger/charges.js';
import {
  beginProviderAuthorize,
  beginProviderCapture,
  confirmProviderCapture,
  recordProviderAuthorized,
  tryProviderHold,
} from '../src/ledger/provider-charges.js';
import { readRefund, recordProviderRefunded, refundCharge } from '../src/ledger/refunds.js';
import { providerIdempotencyKey } from '../src/providers/connector.js';
import type { ProviderConnectors } from '../src/providers/connectors.js';
import type { FaultRuleInput } from '../src/providers/stripe/simulator/faults.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { startStripeMock } from '../src/providers/stripe/stripe-mock.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import { buildRefundIntent, chargeFingerprint, chargeIdFor } from '../src/service/intent.js';
import { createChargeWorker } from '../src/worker/charge-worker.js';
import {
  balanceOf,
  expectLedgerInvariants,
  fundedTenant,
  ledgerIntent,
  newKey,
  openAccount,
  newTenant,
  testPayloadProtection,
  useHarness,
  waitFor,
} from './support/harness.js';

const h = useHarness();

/** Short, so a held answer times out quickly; the simulator answers a normal request in ~1 ms. */
const testRequestTimeoutMs = 1_000;
const amountMinorMax = 1_000_000_000_000;
/** Temporal's retries of the activity, played by the test: the most attempts any test needs. */
const maxActivityAttempts = 6;
const dayMs = 24 * 60 * 60 * 1000;

let sim: StripeSimulator;
let stripe: StripeConnector;
let connectors: ProviderConnectors;
/** Added to the activity's clock: moved on with the simulator's to cross the key retention window. */
let clockOffsetMs = 0;
const hooks: RefundActivityHooks = { nowMs: () => Date.now() + clockOffsetMs };

beforeAll(async () => {
  sim = await StripeSimulator.start();
  stripe = new StripeConnector({
    apiKey: 'sk_test_simulator',
    webhookSecrets: ['whsec_test'],
    endpoint: sim.endpoint,
    // The connector's answer to one call, so the activity's own retries are what is tested.
    maxNetworkRetries: 0,
    requestTimeoutMs: testRequestTimeoutMs,
  });
  connectors = { stripe };
});
afterAll(async () => {
  await sim?.stop();
});
beforeEach(() => {
  sim.faults.clear();
  sim.releaseHolds();
});

interface ProviderCharge {
  tenant: string;
  key: string;
  chargeId: string;
  paymentId: string;
}

/** A provider charge captured in the ledger and at the simulator, as the charge workflow will leave it. */
async function capturedProviderCharge(label: string, amountMinor: number): Promise<ProviderCharge> {
  const tenant = newTenant(label);
  await openAccount(h.pool, tenant, 'payee');
  const key = newKey('charge');
  const request = {
    orderId: `order-${key}`,
    payerAccountId: clearingAccountId('stripe', 'USD'),
    payeeAccountId: 'payee',
    amountMinor,
    currency: 'USD',
    captureMode: 'automatic' as const,
    description: null,
    metadata: null,
    paymentMethod: { provider: 'stripe' as const, id: 'pm_card_visa' },
  };
  const intent: ChargeIntent = { tenant, idempotencyKey: key, chargeId: chargeIdFor(tenant, key), fingerprint: chargeFingerprint(request), request };
  expect((await tryProviderHold(h.pool, intent, 60_000)).charge.status).not.toBe('declined');
  await beginProviderAuthorize(h.pool, tenant, key);
  const authorized = await stripe.authorize({
    reference: { tenant, chargeId: intent.chargeId },
    amountMinor,
    currency: 'USD',
    paymentMethod: 'pm_card_visa',
    idempotencyKey: providerIdempotencyKey(intent.chargeId, 'authorize'),
  });
  if (authorized.outcome !== 'authorized') throw new Error(`authorize answered ${authorized.outcome}`);
  const paymentId = authorized.payment.id;
  await recordProviderAuthorized(h.pool, tenant, key, paymentId, 'authorized', null);
  await beginProviderCapture(h.pool, tenant, key);
  const captured = await stripe.capture({ paymentId, idempotencyKey: providerIdempotencyKey(intent.chargeId, 'capture') });
  if (captured.outcome !== 'captured') throw new Error(`capture answered ${captured.outcome}`);
  const confirmed = await confirmProviderCapture(h.pool, tenant, key, amountMinor);
  expect(confirmed.charge.status).toBe('succeeded');
  return { tenant, key, chargeId: intent.chargeId, paymentId };
}

function refundIntent(charge: { tenant: string; key: string }, refundKey: string, amountMinor?: number): RefundIntent {
  return buildRefundIntent(charge.tenant, charge.key, refundKey, amountMinor === undefined ? {} : { amount: amountMinor }, amountMinorMax);
}

function simRefundsOf(paymentId: string) {
  return [...sim.payments.refunds.values()].filter((refund) => refund.paymentIntent === paymentId);
}

function createRefundRequests(refundId: string, chargeId: string) {
  const key = providerIdempotencyKey(chargeId, `refund:${refundId}`);
  return sim.requests.filter((request) => request.operation === 'create_refund' && request.idempotencyKey === key);
}

/** The clearing account's balance (a system account: the accounts API does not show it). */
async function clearingBalanceMinor(tenant: string): Promise<number> {
  const result = await h.pool.query<{ posted_minor: string }>('SELECT posted_minor FROM account_balances WHERE tenant = $1 AND id = $2', [
    tenant,
    clearingAccountId('stripe', 'USD'),
  ]);
  return Number(result.rows[0]!.posted_minor);
}

async function providerColumns(charge: { tenant: string; key: string }, refundKey: string) {
  const result = await h.pool.query<{ provider_refund_id: string | null; provider_refunded_at: Date | null; provider_refund_failure: string | null }>(
    'SELECT provider_refund_id, provider_refunded_at, provider_refund_failure FROM refunds WHERE tenant = $1 AND charge_key = $2 AND refund_key = $3',
    [charge.tenant, charge.key, refundKey],
  );
  return result.rows[0]!;
}

/**
 * What Temporal does with the activity: run it again after every retryable failure, until it
 * returns or fails for good. Returns the attempts' failures and the outcome.
 */
async function runAsTemporalWould<T>(call: () => Promise<T>): Promise<{ value: T; retried: ApplicationFailure[] }> {
  const retried: ApplicationFailure[] = [];
  for (let attempt = 1; ; attempt++) {
    try {
      return { value: await call(), retried };
    } catch (error) {
      if (!(error instanceof ApplicationFailure) || error.nonRetryable || attempt >= maxActivityAttempts) throw error;
      retried.push(error);
    }
  }
}

function refundActivity(withConnectors: ProviderConnectors = connectors) {
  return createRefundActivities(h.pool, hooks, withConnectors).refundCharge;
}

describe('refunding a provider charge', () => {
  it('one refund is one provider refund, and a repeat of it sends nothing', async () => {
    const charge = await capturedProviderCharge('prov-refund', 1_000);
    const intent = refundIntent(charge, 'r1');

    const first = await refundActivity()(intent);
    expect(first.refund).toMatchObject({ status: 'succeeded', amountMinor: 1_000 });
    const atProvider = simRefundsOf(charge.paymentId);
    expect(atProvider.map((refund) => [refund.amount, refund.metadata['refund_id']])).toEqual([[1_000, intent.refundId]]);
    expect(first.refund.providerRefundId).toBe(atProvider[0]!.id);
    expect(sim.payments.paymentIntents.get(charge.paymentId)!.amountRefunded).toBe(1_000);
    const columns = await providerColumns(charge, 'r1');
    expect(columns).toMatchObject({ provider_refund_id: atProvider[0]!.id, provider_refund_failure: null });
    expect(columns.provider_refunded_at).toBeInstanceOf(Date);

    // A replay of the finished activity (a lost completion) reads the recorded answer.
    const again = await refundActivity()(intent);
    expect(again).toEqual(first);
    expect(createRefundRequests(intent.refundId, charge.chargeId)).toHaveLength(1);
    expect(simRefundsOf(charge.paymentId)).toHaveLength(1);
    // The read path shows it too.
    expect((await readRefund(h.pool, charge.tenant, charge.key, 'r1'))!.refund.providerRefundId).toBe(atProvider[0]!.id);

    // The ledger moved the money back to the clearing account, which the provider's refund settles.
    expect(await clearingBalanceMinor(charge.tenant)).toBe(0);
    expect((await balanceOf(h.pool, charge.tenant, 'payee')).postedMinor).toBe(0);
    await expectLedgerInvariants(h.pool, charge.tenant);
  });

  const lostAnswers: { name: string; fault: FaultRuleInput['fault'] }[] = [
    { name: 'the connection dropped after the provider refunded', fault: { kind: 'drop_after_commit' } },
    { name: 'a 500 after the provider refunded', fault: { kind: 'error_after_commit', status: 500 } },
    { name: 'the answer held past the timeout', fault: { kind: 'hold_after_commit' } },
  ];
  for (const { name, fault } of lostAnswers) {
    it(`retried after ${name}: still one provider refund`, async () => {
      const charge = await capturedProviderCharge('prov-lost', 800);
      const intent = refundIntent(charge, 'r1');
      // Twice: the SDK itself retries a reset connection once.
      sim.addFault({ operation: 'create_refund', times: 2, fault });

      const { value, retried } = await runAsTemporalWould(() => refundActivity()(intent));
      expect(retried.length).toBeGreaterThanOrEqual(1);
      expect(retried.map((failure) => failure.type)).toEqual(retried.map(() => providerRefundFailureTypes.unknown));
      expect(retried[0]!.message).toContain(intent.refundId);

      const atProvider = simRefundsOf(charge.paymentId);
      expect(atProvider).toHaveLength(1);
      expect(atProvider[0]!.amount).toBe(800);
      expect(value.refund.providerRefundId).toBe(atProvider[0]!.id);
      // The answer that arrived was the provider's saved one (a held request is logged once released).
      expect(createRefundRequests(intent.refundId, charge.chargeId).some((request) => request.replayed)).toBe(true);
      expect(await providerColumns(charge, 'r1')).toMatchObject({ provider_refund_id: atProvider[0]!.id });
      await expectLedgerInvariants(h.pool, charge.tenant);
    });
  }

  it('retried after the provider may have pruned the key: looks the refund up instead of refunding again', async () => {
    const charge = await capturedProviderCharge('prov-retention', 600);
    const intent = refundIntent(charge, 'r1');
    sim.addFault({ operation: 'create_refund', times: 2, fault: { kind: 'drop_after_commit' } });
    await expect(refundActivity()(intent)).rejects.toMatchObject({ type: providerRefundFailureTypes.unknown, nonRetryable: false });
    expect(simRefundsOf(charge.paymentId)).toHaveLength(1);

    // A day later (a worker outage): the provider has pruned the key, so sending it again would refund twice.
    sim.advanceClock(dayMs + 1);
    clockOffsetMs = dayMs + 1;
    try {
      const listsBefore = sim.requests.filter((request) => request.operation === 'list_refunds').length;
      const sentBefore = createRefundRequests(intent.refundId, charge.chargeId).length;
      const result = await refundActivity()(intent);
      expect(simRefundsOf(charge.paymentId)).toHaveLength(1);
      expect(result.refund.providerRefundId).toBe(simRefundsOf(charge.paymentId)[0]!.id);
      expect(sim.requests.filter((request) => request.operation === 'list_refunds').length).toBe(listsBefore + 1);
      expect(createRefundRequests(intent.refundId, charge.chargeId)).toHaveLength(sentBefore);
    } finally {
      clockOffsetMs = 0;
    }
  });

  it('past the key retention with no refund at the provider: the lookup finds none and the refund is sent once', async () => {
    const charge = await capturedProviderCharge('prov-retention-none', 600);
    const intent = refundIntent(charge, 'r1');
    sim.addFault({ operation: 'create_refund', times: 1, fault: { kind: 'error_before_commit', status: 503 } });
    await expect(refundActivity()(intent)).rejects.toMatchObject({ type: providerRefundFailureTypes.unknown });
    expect(simRefundsOf(charge.paymentId)).toHaveLength(0);

    sim.advanceClock(dayMs + 1);
    clockOffsetMs = dayMs + 1;
    try {
      const result = await refundActivity()(intent);
      expect(simRefundsOf(charge.paymentId).map((refund) => refund.amount)).toEqual([600]);
      expect(result.refund.providerRefundId).toBe(simRefundsOf(charge.paymentId)[0]!.id);
    } finally {
      clockOffsetMs = 0;
    }
  });

  it('two partial refunds are two provider refunds summing to both; a refund the ledger refuses sends nothing', async () => {
    const charge = await capturedProviderCharge('prov-partial', 1_000);
    const first = await refundActivity()(refundIntent(charge, 'r1', 300));
    const second = await refundActivity()(refundIntent(charge, 'r2', 500));
    const atProvider = simRefundsOf(charge.paymentId);
    expect(atProvider.map((refund) => refund.amount)).toEqual([300, 500]);
    expect([first.refund.providerRefundId, second.refund.providerRefundId]).toEqual(atProvider.map((refund) => refund.id));
    expect(sim.payments.paymentIntents.get(charge.paymentId)!.amountRefunded).toBe(800);

    // 200 left: the ledger refuses 300, and the provider is not asked.
    const sentBefore = sim.requests.filter((request) => request.operation === 'create_refund').length;
    const over = await refundActivity()(refundIntent(charge, 'r3', 300));
    expect(over.refund).toMatchObject({ status: 'failed', failureCode: 'exceeds_refundable' });
    expect(over.refund.providerRefundId).toBeUndefined();
    expect(sim.requests.filter((request) => request.operation === 'create_refund').length).toBe(sentBefore);

    // No amount: the rest, at the provider too.
    const rest = await refundActivity()(refundIntent(charge, 'r4'));
    expect(rest.refund).toMatchObject({ status: 'succeeded', amountMinor: 200 });
    expect(simRefundsOf(charge.paymentId).map((refund) => refund.amount)).toEqual([300, 500, 200]);
    expect(sim.payments.paymentIntents.get(charge.paymentId)!.amountRefunded).toBe(1_000);
    await expectLedgerInvariants(h.pool, charge.tenant);
  });

  it('a refund the provider refuses fails for good with ProviderRefundRejected, recorded on the refund', async () => {
    const charge = await capturedProviderCharge('prov-rejected', 1_000);
    // Refunded at the provider by other means (its dashboard): ours has nothing left to refund there.
    const elsewhere = await stripe.refund({ paymentId: charge.paymentId, amountMinor: 1_000, idempotencyKey: newKey('dashboard') });
    expect(elsewhere.outcome).toBe('refunded');
    const intent = refundIntent(charge, 'r1', 400);

    const failure = await refundActivity()(intent).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(ApplicationFailure);
    expect(failure).toMatchObject({ type: providerRefundFailureTypes.rejected, nonRetryable: true });
    const message = (failure as ApplicationFailure).message;
    expect(message).toContain(intent.refundId);
    expect(message).toContain(charge.paymentId);
    expect(message).toContain('charge_already_refunded');
    expect(message).toContain('docs/providers.md');
    const columns = await providerColumns(charge, 'r1');
    expect(columns.provider_refund_id).toBeNull();
    expect(columns.provider_refund_failure).toMatch(/^state_conflict \(charge_already_refunded\): /);
    // The ledger's decision stands: the money is back on the clearing account.
    const ledgerRefund = (await readRefund(h.pool, charge.tenant, charge.key, 'r1'))!.refund;
    expect(ledgerRefund).toMatchObject({ status: 'succeeded', amountMinor: 400, providerRefundFailure: columns.provider_refund_failure });

    // A repeat answers the same failure without asking the provider again.
    const sent = createRefundRequests(intent.refundId, charge.chargeId).length;
    await expect(refundActivity()(intent)).rejects.toMatchObject({ type: providerRefundFailureTypes.rejected, nonRetryable: true });
    expect(createRefundRequests(intent.refundId, charge.chargeId)).toHaveLength(sent);

    // The operator settles it by hand and records the provider's refund; the failure stays as history.
    const settled = await recordProviderRefunded(h.pool, intent, 're_settled_by_hand');
    expect(settled.refund).toMatchObject({ providerRefundId: 're_settled_by_hand', providerRefundFailure: columns.provider_refund_failure });
    await expect(recordProviderRefunded(h.pool, intent, 're_another')).rejects.toMatchObject({ refusal: 'providerPaymentConflict' });
    expect((await refundActivity()(intent)).refund.providerRefundId).toBe('re_settled_by_hand');
  });

  it('a worker without the provider\'s connector keeps the refund retrying instead of succeeding', async () => {
    const charge = await capturedProviderCharge('prov-unconfigured', 500);
    const intent = refundIntent(charge, 'r1');
    await expect(refundActivity({})(intent)).rejects.toMatchObject({ type: providerRefundFailureTypes.unavailable, nonRetryable: false });
    expect(simRefundsOf(charge.paymentId)).toHaveLength(0);
    const result = await refundActivity()(intent);
    expect(simRefundsOf(charge.paymentId).map((refund) => refund.id)).toEqual([result.refund.providerRefundId]);
  });

  it('a refund of a ledger charge is unchanged: no provider is asked, nothing recorded beside it', async () => {
    const tenant = await fundedTenant(h, { label: 'ledger-refund', payerMinor: 5_000 });
    const key = newKey('charge');
    const chargeIntent = ledgerIntent(tenant, key, 'payer', 'payee', 700);
    await tryHold(h.pool, chargeIntent, 60_000);
    await confirmHold(h.pool, tenant, key, 700);
    const requestsBefore = sim.requests.length;

    const result = await refundActivity()(refundIntent({ tenant, key }, 'r1', 250));
    expect(result.refund).toMatchObject({ status: 'succeeded', amountMinor: 250 });
    expect(result).toEqual(await refundCharge(h.pool, refundIntent({ tenant, key }, 'r1', 250)));
    expect(result.refund).not.toHaveProperty('providerRefundId');
    expect(result.refund).not.toHaveProperty('providerRefundFailure');
    expect(sim.requests.length).toBe(requestsBefore);
    expect(await providerColumns({ tenant, key }, 'r1')).toEqual({ provider_refund_id: null, provider_refunded_at: null, provider_refund_failure: null });
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(5_000 - 700 + 250);
    // Recording a provider refund on it is refused: the ledger trusts no caller.
    await expect(recordProviderRefunded(h.pool, { tenant, chargeKey: key, refundKey: 'r1' }, 're_x')).rejects.toMatchObject({ refusal: 'providerStepNotAllowed' });
  });

  it('the refund decision stays append-only: only a null provider column may be written, once', async () => {
    const charge = await capturedProviderCharge('prov-append-only', 300);
    await refundActivity()(refundIntent(charge, 'r1'));
    const where = 'WHERE tenant = $1 AND charge_key = $2';
    const params = [charge.tenant, charge.key];
    await expect(h.pool.query(`UPDATE refunds SET amount_minor = 1 ${where}`, params)).rejects.toThrow(/append-only/);
    await expect(h.pool.query(`UPDATE refunds SET provider_refund_id = 're_other', provider_refunded_at = now() ${where}`, params)).rejects.toThrow(/append-only/);
    await expect(h.pool.query(`DELETE FROM refunds ${where}`, params)).rejects.toThrow(/append-only/);
  });
});

describe('refunding a provider charge through a worker', () => {
  it('the refund workflow retries a lost provider answer and ends with one provider refund', async () => {
    const charge = await capturedProviderCharge('prov-worker', 900);
    const taskQueue = `provider-refunds-${newKey('q')}`;
    const connection = await NativeConnection.connect({ address: inject('stack').temporalAddress });
    const worker = await createChargeWorker({
      connection,
      namespace: 'default',
      ledger: h.pool,
      taskQueue,
      providers: connectors,
      holdSweeper: false,
      workflowBundle: { codePath: inject('stack').workflowBundlePath },
      payloadProtection: testPayloadProtection(),
    });
    const running = worker.run();
    try {
      sim.addFault({ operation: 'create_refund', times: 2, fault: { kind: 'drop_after_commit' } });
      const reply = await h.clientFor({ taskQueue }).refund(charge.tenant, charge.key, 'r1', { amount: 900 });
      expect(reply.refund).toMatchObject({ status: 'succeeded', amountMinor: 900 });
      const atProvider = simRefundsOf(charge.paymentId);
      expect(atProvider.map((refund) => refund.amount)).toEqual([900]);
      expect(createRefundRequests(reply.refund.id, charge.chargeId).length).toBeGreaterThan(1);
      const columns = await waitFor(async () => {
        const row = await providerColumns(charge, 'r1');
        return row.provider_refund_id ? row : null;
      }, { what: 'the provider refund recorded' });
      expect(columns.provider_refund_id).toBe(atProvider[0]!.id);
    } finally {
      worker.shutdown();
      await running;
      await connection.close();
    }
  });
});

describe('the refund calls against stripe-mock (Stripe\'s schema)', () => {
  it('refund with our reference in metadata, and findRefund listing a payment\'s refunds, are requests Stripe accepts', async () => {
    const mock = await startStripeMock();
    try {
      const wire = new StripeConnector({ apiKey: 'sk_test_123', webhookSecrets: ['whsec_test'], endpoint: mock.endpoint, maxNetworkRetries: 0 });
      const refunded = await wire.refund({
        paymentId: 'pi_123',
        amountMinor: 500,
        idempotencyKey: 'ch_wire:refund:re_wire',
        reference: { tenant: 'tenant-a', chargeId: 'ch_wire', refundId: 're_wire' },
      });
      expect(refunded).toMatchObject({ outcome: 'refunded' });
      // stripe-mock's fixture refund carries none of our metadata: the request was accepted and read.
      expect(await wire.findRefund({ paymentId: 'pi_123', refundId: 're_wire' })).toEqual({ outcome: 'not_found' });
    } finally {
      await mock.stop();
    }
  });
});
