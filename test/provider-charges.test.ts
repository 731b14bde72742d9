import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { IdempotencyConflictError } from '../src/domain/errors.js';
import type { Charge, ChargeIntent } from '../src/domain/charge.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { clearingAccountId } from '../src/domain/providers.js';
import { cancelHold, readCharge } from '../src/ledger/charges.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import type { PaymentIntentRecord } from '../src/providers/stripe/simulator/payments.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import {
  cancelChargeUpdate,
  captureChargeUpdate,
  chargeStatusQuery,
  chargeWorkflowType,
  providerEventSignal,
  type ChargePolicy,
  type ChargeWorkflowInput,
} from '../workflows/definitions.js';
import { payerActionLookEveryMs } from '../workflows/provider-steps.js';
import {
  balanceOf,
  expectLedgerInvariants,
  expectReconciled,
  fundedTenant,
  newKey,
  providerIntent,
  startTestWorker,
  testPolicy,
  useHarness,
  waitFor,
} from './support/harness.js';
import { openTestApi } from './support/api.js';

/**
 * A charge with a provider in the loop, end to end: the real Temporal dev server and PostgreSQL, the
 * official Stripe SDK against the stateful simulator. At the provider and in the ledger: one
 * PaymentIntent per charge, captured at most once, every authorization captured or voided.
 */
const h = useHarness();
const taskQueue = `provider-charges-${randomBytes(4).toString('hex')}`;
let sim: StripeSimulator;
let connector: StripeConnector;
let worker: Awaited<ReturnType<typeof startTestWorker>>;
/** Throws once, after the provider answered and before the ledger recorded it, for the steps listed. */
const crashAfterProvider = new Set<string>();
/** After the provider answered, the ledger refuses the step's statement (SQLSTATE 42883) this many more times. */
const statementRejectedAfterProvider = new Map<string, number>();
/** Runs once, after the provider answered the authorization and before the authorize step returns, for the key. */
const whileAuthorizeAnswers = new Map<string, () => Promise<void>>();

beforeAll(async () => {
  sim = await StripeSimulator.start({ port: 0 });
  // No SDK retries: every retry below is the workflow's, with the same key, where the test sees it.
  const stripe = new StripeConnector({ apiKey: 'sk_test_chargeguard', webhookSecrets: ['whsec_test'], endpoint: sim.endpoint, maxNetworkRetries: 0, requestTimeoutMs: 2_000 });
  connector = stripe;
  worker = await startTestWorker({
    taskQueue,
    pool: h.pool,
    providers: { stripe },
    providerHooks: {
      afterProvider: async (step, _tenant, key) => {
        const during = step === 'authorize' ? whileAuthorizeAnswers.get(key) : undefined;
        if (during) {
          whileAuthorizeAnswers.delete(key);
          await during();
        }
        if (crashAfterProvider.delete(`${step}:${key}`)) throw new Error(`injected crash after the provider answered ${step}`);
        const rejections = statementRejectedAfterProvider.get(`${step}:${key}`) ?? 0;
        if (rejections > 0) {
          statementRejectedAfterProvider.set(`${step}:${key}`, rejections - 1);
          throw Object.assign(new Error(`function ledger_${step} does not exist (injected)`), { code: '42883' });
        }
      },
    },
    holdSweeper: false,
  });
});

afterAll(async () => {
  await worker?.stop();
  await sim?.stop();
});

const policy: ChargePolicy = { ...testPolicy, providerStepStartToCloseMs: 10_000, providerAuthorizeBudgetMs: 20_000 };

function start(intent: ChargeIntent, overrides: Partial<ChargePolicy> = {}) {
  const input: ChargeWorkflowInput = { intent, policy: { ...policy, ...overrides } };
  return h.temporal.workflow.start(chargeWorkflowType, {
    taskQueue,
    workflowId: chargeWorkflowId(intent.tenant, intent.idempotencyKey),
    args: [input],
  });
}

async function run(intent: ChargeIntent, overrides: Partial<ChargePolicy> = {}): Promise<Charge> {
  return (await start(intent, overrides)).result() as Promise<Charge>;
}

function paymentsOf(intent: ChargeIntent): PaymentIntentRecord[] {
  return [...sim.payments.paymentIntents.values()].filter(
    (payment) => payment.metadata['tenant'] === intent.tenant && payment.metadata['charge_id'] === intent.chargeId,
  );
}

/** The clearing account's balance (a system account: the API's account reads do not show it). */
async function clearing(tenant: string): Promise<{ postedMinor: number; pendingMinor: number }> {
  const result = await h.pool.query<{ posted_minor: string; pending_minor: string }>(
    'SELECT posted_minor, pending_minor FROM account_balances WHERE tenant = $1 AND id = $2',
    [tenant, clearingAccountId('stripe', 'USD')],
  );
  const row = result.rows[0];
  if (!row) throw new Error(`tenant ${tenant} has no clearing account`);
  return { postedMinor: Number(row.posted_minor), pendingMinor: Number(row.pending_minor) };
}

async function statusOf(intent: ChargeIntent): Promise<Charge> {
  return h.temporal.workflow.getHandle(chargeWorkflowId(intent.tenant, intent.idempotencyKey)).query(chargeStatusQuery);
}

describe('a provider charge', () => {
  it('automatic capture: one PaymentIntent authorized and captured, the payee credited from the clearing account', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-auto' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa', { amountMinor: 1_250 });
    const charge = await run(intent);

    expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_250, payerAccountId: '@provider/stripe/USD' });
    expect(charge.provider).toMatchObject({ provider: 'stripe', paymentMethod: 'pm_card_visa', state: 'captured' });
    const payments = paymentsOf(intent);
    expect(payments).toHaveLength(1);
    expect(payments[0]).toMatchObject({ id: charge.provider!.paymentId, status: 'succeeded', amountReceived: 1_250 });
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(1_250);
    expect(await clearing(tenant)).toMatchObject({ postedMinor: -1_250, pendingMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('a declined card: the charge is declined with the caller code and the provider code, nothing held anywhere', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-decline' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa_chargeDeclinedInsufficientFunds');
    const charge = await run(intent);

    expect(charge).toMatchObject({ status: 'declined', declineCode: 'insufficient_funds', amountHeldMinor: 0 });
    expect(charge.provider).toMatchObject({ state: 'declined', declineCode: 'insufficient_funds' });
    expect(paymentsOf(intent).every((payment) => payment.status !== 'requires_capture' && payment.status !== 'succeeded')).toBe(true);
    expect(await clearing(tenant)).toMatchObject({ postedMinor: 0, pendingMinor: 0 });
  });

  it('manual capture of part of the hold: the provider captures 600 of 1,000 once, the ledger moves 600', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-manual' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_mastercard', { captureMode: 'manual' });
    const handle = await start(intent);
    await waitFor(async () => (await statusOf(intent)).provider?.state === 'authorized', { what: 'the authorization' });
    expect(paymentsOf(intent)[0]).toMatchObject({ status: 'requires_capture' });

    const captured = await handle.executeUpdate(captureChargeUpdate, { args: [{ amountMinor: 600 }] });
    expect(captured).toMatchObject({ status: 'succeeded', amountCapturedMinor: 600 });
    expect(paymentsOf(intent)).toHaveLength(1);
    expect(paymentsOf(intent)[0]).toMatchObject({ status: 'succeeded', amountReceived: 600 });
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(600);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('manual hold cancelled: the ledger releases the hold, then the provider voids the authorization', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-cancel' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa', { captureMode: 'manual' });
    const handle = await start(intent);
    await waitFor(async () => (await statusOf(intent)).provider?.state === 'authorized', { what: 'the authorization' });

    const cancelled = await handle.executeUpdate(cancelChargeUpdate);
    expect(cancelled).toMatchObject({ status: 'cancelled' });
    expect(cancelled.provider?.state).toBe('voided');
    expect(paymentsOf(intent).map((payment) => payment.status)).toEqual(['canceled']);
    expect(await clearing(tenant)).toMatchObject({ postedMinor: 0, pendingMinor: 0 });
  });

  it('manual hold expired: voided at the provider when the hold TTL passes', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-ttl' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa', { captureMode: 'manual' });
    const charge = await run(intent, { holdTtlMs: 1_500 });
    expect(charge).toMatchObject({ status: 'cancelled', failureReason: 'hold_expired' });
    expect(paymentsOf(intent).map((payment) => payment.status)).toEqual(['canceled']);
  });

  it('Cancel before the workflow ran (void before authorize): nothing is ever sent to the provider', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-null' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa');
    await cancelHold(h.pool, intent, 'requested_by_caller');
    const charge = await run(intent);
    expect(charge.status).toBe('cancelled');
    expect(paymentsOf(intent)).toHaveLength(0);
    expect(sim.requests.filter((request) => request.path === '/v1/payment_intents' && request.method === 'POST')
      .every((request) => !(request.idempotencyKey ?? '').startsWith(intent.chargeId))).toBe(true);
  });

  it('3-D Secure: requires_action with the next action, then the payer authenticates and the provider event completes the charge', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-3ds' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required');
    const handle = await start(intent);
    await waitFor(async () => (await statusOf(intent)).status === 'requires_action', { what: 'requires_action' });
    const waiting = await statusOf(intent);
    expect(waiting.provider?.nextAction).toMatchObject({ type: expect.any(String) });
    const [payment] = paymentsOf(intent);
    expect(payment).toBeDefined();

    sim.payments.authenticate(payment!.id, true);
    await handle.signal(providerEventSignal, { eventId: 'evt_test_1', type: 'payment_intent.amount_capturable_updated', paymentId: payment!.id });
    const charge = (await handle.result()) as Charge;
    expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
    expect(paymentsOf(intent)).toHaveLength(1);
    expect(paymentsOf(intent)[0]).toMatchObject({ status: 'succeeded' });
  });

  it('3-D Secure completed but its provider event lost: the look before the hold expires finds the authorization and the charge succeeds', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-3ds-lost' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required');
    const handle = await start(intent, { holdTtlMs: 3_000 });
    const waiting = await waitFor(async () => {
      const charge = await statusOf(intent);
      return charge.status === 'requires_action' ? charge : null;
    }, { what: 'requires_action' });
    // The payer authenticates; no event reaches the workflow (as when the receiver answered 503).
    sim.payments.authenticate(waiting.provider!.paymentId!, true);
    const charge = (await handle.result()) as Charge;
    expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
    expect(paymentsOf(intent).map((payment) => payment.status)).toEqual(['succeeded']);
  });

  it('3-D Secure: the payer authenticates and the provider event arrives while the authorize step is still answering: the event wakes the wait at once', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-3ds-race' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required');
    const workflowId = chargeWorkflowId(intent.tenant, intent.idempotencyKey);
    let eventSent = false;
    // The provider has answered requires_action; before the step returns it, the payer authenticates
    // and the provider's event reaches the workflow (accepted by Temporal before the answer is).
    whileAuthorizeAnswers.set(intent.idempotencyKey, async () => {
      const [payment] = paymentsOf(intent);
      if (!payment || payment.status !== 'requires_action') throw new Error(`expected one payment requiring action, found ${JSON.stringify(paymentsOf(intent))}`);
      sim.payments.authenticate(payment.id, true);
      await h.temporal.workflow.getHandle(workflowId).signal(providerEventSignal, {
        eventId: `evt_${newKey()}`,
        type: 'payment_intent.amount_capturable_updated',
        paymentId: payment.id,
      });
      eventSent = true;
    });
    const holdTtlMs = 600_000;
    const handle = await start(intent, { holdTtlMs });
    // The periodic look comes a minute after the wait began at the soonest: only the event can end this in time.
    const deadlineMs = 20_000;
    expect(deadlineMs).toBeLessThan(payerActionLookEveryMs(holdTtlMs));
    const charge = await waitFor(async () => {
      const current = await statusOf(intent);
      return current.status === 'succeeded' ? current : null;
    }, { what: 'the charge to succeed on the event that came with the authorization', timeoutMs: deadlineMs });
    expect(eventSent).toBe(true);
    expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
    expect(await handle.result()).toMatchObject({ status: 'succeeded' });
    expect(paymentsOf(intent).map((payment) => payment.status)).toEqual(['succeeded']);
    // One look at the payment after the authorization: the event's, not a periodic one.
    const history = await handle.fetchHistory();
    const refreshes = (history.events ?? []).filter((event) => event.activityTaskScheduledEventAttributes?.activityType?.name === 'refreshProviderPayment');
    expect(refreshes).toHaveLength(1);
  });

  it('3-D Secure never completed: the charge expires with its hold TTL and the payment is cancelled', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-3ds-ttl' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required');
    const charge = await run(intent, { holdTtlMs: 1_500 });
    expect(charge).toMatchObject({ status: 'cancelled', failureReason: 'payer_action_expired' });
    expect(paymentsOf(intent).map((payment) => payment.status)).toEqual(['canceled']);
    expect(await clearing(tenant)).toMatchObject({ pendingMinor: 0 });
  });

  it('the worker crashes after the provider authorized and after it captured, before the ledger recorded either: still one PaymentIntent, captured once', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-crash' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa');
    crashAfterProvider.add(`authorize:${intent.idempotencyKey}`);
    crashAfterProvider.add(`capture:${intent.idempotencyKey}`);
    const charge = await run(intent);
    expect(crashAfterProvider.size).toBe(0);
    expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
    expect(paymentsOf(intent)).toHaveLength(1);
    expect(paymentsOf(intent)[0]).toMatchObject({ status: 'succeeded', amountReceived: 1_000 });
  });

  it('a capture the provider made whose ledger record is refused as a statement is retried until recorded, never decided: one PaymentIntent captured once, the payee credited', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-capture-rejected' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa', { amountMinor: 1_400 });
    statementRejectedAfterProvider.set(`capture:${intent.idempotencyKey}`, 3);
    const charge = await run(intent);
    expect(statementRejectedAfterProvider.get(`capture:${intent.idempotencyKey}`)).toBe(0);
    expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_400 });
    expect(paymentsOf(intent)).toHaveLength(1);
    expect(paymentsOf(intent)[0]).toMatchObject({ status: 'succeeded', amountReceived: 1_400 });
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(1_400);
    expect(await clearing(tenant)).toMatchObject({ postedMinor: -1_400, pendingMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('an authorization whose ledger record is refused as a statement decides the charge at once: cancelled, the authorization voided, nothing held', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-authorize-rejected' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa', { amountMinor: 1_500 });
    statementRejectedAfterProvider.set(`authorize:${intent.idempotencyKey}`, 1);
    const charge = await run(intent);
    expect(charge).toMatchObject({ status: 'cancelled', amountCapturedMinor: 0 });
    expect(paymentsOf(intent).map((payment) => payment.status)).toEqual(['canceled']);
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(0);
    expect(await clearing(tenant)).toMatchObject({ postedMinor: 0, pendingMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  for (const crashAfter of ['authorize', 'capture'] as const) {
    it(`a worker SIGKILLed after the provider answered ${crashAfter}, before the ledger recorded it: another worker finishes, one PaymentIntent captured once`, async () => {
      const stack = inject('stack');
      const crashQueue = `provider-crash-${randomBytes(4).toString('hex')}`;
      const crashing = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/provider-crash-worker.ts'], {
        env: {
          ...process.env,
          TEMPORAL_ADDRESS: stack.temporalAddress,
          DATABASE_URL: stack.databaseUrl,
          TASK_QUEUE: crashQueue,
          WORKFLOW_BUNDLE_PATH: stack.workflowBundlePath,
          CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFile,
          STRIPE_SIMULATOR_URL: sim.url,
          CRASH_AFTER_PROVIDER_STEP: crashAfter,
        },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let output = '';
      crashing.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      const exited = new Promise<NodeJS.Signals | null>((resolve) => crashing.once('exit', (_code, signal) => resolve(signal)));
      await waitFor(async () => output.includes('worker ready'), { timeoutMs: 60_000, what: 'the crashing worker to start' });

      const tenant = await fundedTenant(h, { label: 'pc-kill' });
      const intent = providerIntent(tenant, newKey(), 'pm_card_visa');
      const input: ChargeWorkflowInput = { intent, policy: { ...policy, providerStepStartToCloseMs: 2_000 } };
      const handle = await h.temporal.workflow.start(chargeWorkflowType, {
        taskQueue: crashQueue,
        workflowId: chargeWorkflowId(tenant, intent.idempotencyKey),
        args: [input],
      });
      expect(await exited).toBe('SIGKILL');
      expect(output).toContain(`after the provider answered ${crashAfter}`);
      // The provider acted and the ledger does not know yet: the window this test is about.
      expect(paymentsOf(intent)).toHaveLength(1);

      const healthy = await startTestWorker({ taskQueue: crashQueue, pool: h.pool, providers: { stripe: connector }, holdSweeper: false });
      try {
        const charge = (await handle.result()) as Charge;
        expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
      } finally {
        await healthy.stop();
      }
      expect(paymentsOf(intent)).toHaveLength(1);
      expect(paymentsOf(intent)[0]).toMatchObject({ status: 'succeeded', amountReceived: 1_000 });
      await expectReconciled(h, tenant);
    });
  }

  for (const fault of [
    { kind: 'drop_after_commit' },
    { kind: 'error_after_commit', status: 500 },
    { kind: 'error_before_commit', status: 503 },
    { kind: 'rate_limit' },
    // Held with its key in flight: the workflow's retry meanwhile gets 409 idempotency_key_in_use.
    { kind: 'hold_before_commit', holdMs: 2_500 },
    // Committed, then the answer held past the connector's 2 s timeout: the caller times out.
    { kind: 'hold_after_commit', holdMs: 2_500 },
  ] as const) {
    it(`faults at the provider (${fault.kind} on authorize and on capture): one PaymentIntent, captured once`, async () => {
      const tenant = await fundedTenant(h, { label: 'pc-fault' });
      const intent = providerIntent(tenant, newKey(), 'pm_card_visa');
      sim.addFault({ operation: 'create_payment_intent', fault, times: 2 });
      sim.addFault({ operation: 'capture_payment_intent', fault, times: 2 });
      const charge = await run(intent);
      expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
      expect(paymentsOf(intent)).toHaveLength(1);
      expect(paymentsOf(intent)[0]).toMatchObject({ status: 'succeeded', amountReceived: 1_000 });
      const row = await readCharge(h.pool, tenant, intent.idempotencyKey);
      expect(row?.charge.provider?.paymentId).toBe(paymentsOf(intent)[0]!.id);
    });
  }

  it('a provider that never answers authorize within its budget: the charge is cancelled and whatever it holds is voided', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-down' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa');
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'error_after_commit', status: 500 }, times: 1 });
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'error_before_commit', status: 503 }, times: 1_000 });
    try {
      const charge = await run(intent, { providerAuthorizeBudgetMs: 3_000 });
      expect(charge).toMatchObject({ status: 'cancelled', failureReason: 'provider_unavailable' });
      // The first attempt did create an authorization (its answer was lost): the void found it by reference.
      expect(paymentsOf(intent).map((payment) => payment.status)).toEqual(['canceled']);
      expect(await clearing(tenant)).toMatchObject({ pendingMinor: 0 });
    } finally {
      sim.faults.clear();
    }
  });

  it('ten starts of the same key at once: one execution, one PaymentIntent', async () => {
    const tenant = await fundedTenant(h, { label: 'pc-dup' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa');
    const starts = await Promise.allSettled(Array.from({ length: 10 }, () => start(intent)));
    expect(starts.filter((s) => s.status === 'fulfilled')).toHaveLength(1);
    const charge = (await h.temporal.workflow.getHandle(chargeWorkflowId(tenant, intent.idempotencyKey)).result()) as Charge;
    expect(charge.status).toBe('succeeded');
    expect(paymentsOf(intent)).toHaveLength(1);
  });

  describe('through the service (what the HTTP API, MCP and CLI call)', () => {
    const body = (overrides: Record<string, unknown> = {}) => ({
      order_id: `order-${randomBytes(4).toString('hex')}`,
      payment_method: 'pm_card_visa',
      payee_account_id: 'payee',
      amount: 700,
      currency: 'USD',
      ...overrides,
    });

    it('twenty identical requests at once: one execution, one PaymentIntent, twenty identical answers', async () => {
      const tenant = await fundedTenant(h, { label: 'pc-svc-dup' });
      const key = newKey();
      const request = body();
      const client = h.clientFor({ taskQueue, policy });
      const replies = await Promise.all(Array.from({ length: 20 }, () => client.charge(tenant, key, request)));
      expect(replies.filter((reply) => !reply.replayed)).toHaveLength(1);
      for (const reply of replies) expect(reply.charge).toEqual(replies[0]!.charge);
      expect(replies[0]!.charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 700 });
      const payments = [...sim.payments.paymentIntents.values()].filter((p) => p.metadata['tenant'] === tenant);
      expect(payments).toHaveLength(1);
      await expect(client.charge(tenant, key, { ...request, payment_method: 'pm_card_mastercard' })).rejects.toBeInstanceOf(IdempotencyConflictError);
    });

    it('3-D Secure: the caller is answered at once with requires_action and the next action, not after its whole wait', async () => {
      const tenant = await fundedTenant(h, { label: 'pc-svc-3ds' });
      const reply = await h.clientFor({ taskQueue, policy }).charge(tenant, newKey(), body({ payment_method: 'pm_card_threeDSecure2Required' }));
      expect(reply.charge.status).toBe('requires_action');
      expect(reply.charge.provider?.nextAction).toMatchObject({ type: expect.any(String) });
      // Answered at once, but not decided: every surface says "not completed" (HTTP: 202).
      expect(reply.completed).toBe(false);
    });

    it('a payment method the provider does not know: the charge is cancelled (provider_rejected), nothing held', async () => {
      const tenant = await fundedTenant(h, { label: 'pc-svc-unknown' });
      const reply = await h.clientFor({ taskQueue, policy }).charge(tenant, newKey(), body({ payment_method: 'pm_does_not_exist' }));
      expect(reply.charge).toMatchObject({ status: 'cancelled', failureReason: 'provider_rejected' });
      expect(await clearing(tenant)).toMatchObject({ postedMinor: 0, pendingMinor: 0 });
      expect([...sim.payments.paymentIntents.values()].filter((p) => p.metadata['tenant'] === tenant && p.status === 'requires_capture')).toHaveLength(0);
    });

    it('a currency the payee does not hold: refused naming the field before anything starts or reaches the provider', async () => {
      const tenant = await fundedTenant(h, { label: 'pc-svc-eur' });
      const key = newKey();
      const before = sim.requests.length;
      await expect(h.clientFor({ taskQueue, policy }).charge(tenant, key, body({ currency: 'EUR' }))).rejects.toThrow(/currency: account payee holds USD, not EUR/);
      expect(sim.requests.length).toBe(before);
      expect(await readCharge(h.pool, tenant, key)).toBeNull();
    });

    it('the ledger declines a provider charge the payee cannot take (a frozen payee), and the provider is never asked', async () => {
      const tenant = await fundedTenant(h, { label: 'pc-frozen' });
      const intent = providerIntent(tenant, newKey(), 'pm_card_visa');
      await h.pool.query("UPDATE accounts SET frozen = true WHERE tenant = $1 AND id = 'payee'", [tenant]);
      const before = sim.requests.length;
      const charge = await run(intent);
      expect(charge).toMatchObject({ status: 'declined', declineCode: 'account_frozen' });
      expect(sim.requests.length).toBe(before);
    });
  });

  it("3-D Secure closed by the provider's own signed webhook: the simulator delivers each event twice to the API's receiver, the workflow wakes, looks again and captures once", async () => {
    const api = await openTestApi({ providers: { stripe: connector } });
    sim.configureWebhooks({ url: `${api.baseUrl}/v1/provider-events/stripe`, secrets: ['whsec_test'], duplicate: true });
    try {
      const tenant = await fundedTenant(h, { label: 'pc-webhook' });
      const intent = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required');
      const handle = await start(intent);
      const waiting = await waitFor(async () => {
        const charge = await statusOf(intent);
        return charge.status === 'requires_action' ? charge : null;
      }, { what: 'requires_action' });
      // The payer authenticates at the provider; nothing but the provider's webhook tells us.
      const response = await fetch(`${sim.url}/_simulator/payment_intents/${waiting.provider!.paymentId!}/authenticate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ outcome: 'succeed' }),
      });
      expect(response.status).toBe(200);
      const charge = (await handle.result()) as Charge;
      expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_000 });
      expect(paymentsOf(intent)).toHaveLength(1);
      expect(paymentsOf(intent)[0]).toMatchObject({ status: 'succeeded', amountReceived: 1_000 });
    } finally {
      sim.configureWebhooks(null);
      await api.close();
    }
  });
});
