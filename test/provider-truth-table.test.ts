import { ApplicationFailure } from '@temporalio/common';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProviderActivities, type ProviderActivities } from '../activities/provider-activities.js';
import { createHoldSweeperActivities } from '../activities/hold-sweeper-activities.js';
import type { ChargeIntent } from '../src/domain/charge.js';
import { cancelHold, readCharge, tryHold, type LedgerCharge } from '../src/ledger/charges.js';
import { beginProviderAuthorize, beginProviderCapture } from '../src/ledger/provider-charges.js';
import { tryProviderHold } from '../src/ledger/provider-charges.js';
import type { PaymentIntentRecord } from '../src/providers/stripe/simulator/payments.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import { fundedTenant, ledgerIntent, newKey, providerIntent, useHarness } from './support/harness.js';

/**
 * The provider participant's truth table (docs/providers.md): each step of the provider saga, in
 * each state the ledger can hold a provider charge in, run five times at once and once more after.
 * Every run gives the same answer, the provider sees at most one payment per charge, and a step
 * that must not reach the provider sends nothing at all.
 */
const h = useHarness();
const concurrentRuns = 5;
let sim: StripeSimulator;
let steps: ProviderActivities;

beforeAll(async () => {
  sim = await StripeSimulator.start({ port: 0 });
  const stripe = new StripeConnector({ apiKey: 'sk_test_tt', webhookSecrets: ['whsec_tt'], endpoint: sim.endpoint, maxNetworkRetries: 0, requestTimeoutMs: 2_000 });
  steps = createProviderActivities(h.pool, { stripe });
});

afterAll(async () => {
  await sim?.stop();
});

type Start = 'none' | 'cancelled-before-try' | 'held' | 'authorize-sent-answer-lost' | 'authorized' | 'declined' | 'captured' | 'cancelled-authorized' | 'voided';
type Step = 'authorize' | 'capture' | 'void';

async function newCharge(paymentMethod = 'pm_card_visa'): Promise<ChargeIntent> {
  const tenant = await fundedTenant(h, { label: 'ptt' });
  return providerIntent(tenant, newKey(), paymentMethod, { captureMode: 'manual' });
}

/** Brings a fresh charge to `start` through the same steps the workflow takes. */
async function arrange(intent: ChargeIntent, start: Start): Promise<void> {
  const { tenant, idempotencyKey } = intent;
  switch (start) {
    case 'none':
      return;
    case 'cancelled-before-try':
      await cancelHold(h.pool, intent, 'requested_by_caller');
      return;
    case 'held':
      await tryProviderHold(h.pool, intent, 60_000);
      return;
    case 'authorize-sent-answer-lost':
      await tryProviderHold(h.pool, intent, 60_000);
      sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'error_after_commit', status: 500 }, idempotencyKeyPrefix: intent.chargeId });
      await expect(steps.authorizeAtProvider(intent)).rejects.toThrow();
      return;
    case 'authorized':
      await tryProviderHold(h.pool, intent, 60_000);
      await steps.authorizeAtProvider(intent);
      return;
    case 'declined':
      return arrangeDeclined(intent);
    case 'captured':
      await tryProviderHold(h.pool, intent, 60_000);
      await steps.authorizeAtProvider(intent);
      await steps.captureAtProvider(tenant, idempotencyKey, null);
      return;
    case 'cancelled-authorized':
      await tryProviderHold(h.pool, intent, 60_000);
      await steps.authorizeAtProvider(intent);
      await cancelHold(h.pool, intent, 'requested_by_caller');
      return;
    case 'voided':
      await tryProviderHold(h.pool, intent, 60_000);
      await steps.authorizeAtProvider(intent);
      await cancelHold(h.pool, intent, 'requested_by_caller');
      await steps.voidAtProvider(tenant, idempotencyKey);
      return;
  }
}

async function arrangeDeclined(intent: ChargeIntent): Promise<void> {
  // A declining card needs an intent of its own: the payment method is part of the request.
  Object.assign(intent, providerIntent(intent.tenant, intent.idempotencyKey, 'pm_card_visa_chargeDeclined', { captureMode: 'manual' }));
  await tryProviderHold(h.pool, intent, 60_000);
  await steps.authorizeAtProvider(intent);
}

function runStep(intent: ChargeIntent, step: Step): Promise<LedgerCharge | null> {
  switch (step) {
    case 'authorize':
      return steps.authorizeAtProvider(intent);
    case 'capture':
      return steps.captureAtProvider(intent.tenant, intent.idempotencyKey, null);
    case 'void':
      return steps.voidAtProvider(intent.tenant, intent.idempotencyKey);
  }
}

/** The answer of one run: the charge's state, or the refusal's type. */
async function outcome(intent: ChargeIntent, step: Step): Promise<string> {
  try {
    const row = await runStep(intent, step);
    return row ? `${row.holdState}/${row.charge.provider?.state ?? 'none'}` : 'no row';
  } catch (error) {
    if (error instanceof ApplicationFailure) return `refused ${error.type}`;
    throw error;
  }
}

function paymentsOf(intent: ChargeIntent): PaymentIntentRecord[] {
  return [...sim.payments.paymentIntents.values()].filter((p) => p.metadata['charge_id'] === intent.chargeId);
}

function requestsOf(intent: ChargeIntent): number {
  return sim.requests.filter((r) => (r.idempotencyKey ?? '').startsWith(intent.chargeId)).length;
}

interface Cell {
  start: Start;
  step: Step;
  /** Every run's answer. */
  answer: string;
  /** The provider's payments for the charge afterwards, by status. */
  payments: string[];
  /** Whether the step may send anything to the provider. */
  sends: boolean;
}

const table: Cell[] = [
  { start: 'none', step: 'authorize', answer: 'refused HoldNotTried', payments: [], sends: false },
  { start: 'cancelled-before-try', step: 'authorize', answer: 'refused HoldCancelled', payments: [], sends: false },
  { start: 'held', step: 'authorize', answer: 'TRIED/authorized', payments: ['requires_capture'], sends: true },
  { start: 'authorize-sent-answer-lost', step: 'authorize', answer: 'TRIED/authorized', payments: ['requires_capture'], sends: true },
  { start: 'authorized', step: 'authorize', answer: 'TRIED/authorized', payments: ['requires_capture'], sends: false },
  { start: 'declined', step: 'authorize', answer: 'DECLINED/declined', payments: ['requires_payment_method'], sends: false },
  { start: 'cancelled-authorized', step: 'authorize', answer: 'refused HoldCancelled', payments: ['requires_capture'], sends: false },
  { start: 'held', step: 'capture', answer: 'refused ProviderStepNotAllowed', payments: [], sends: false },
  { start: 'authorized', step: 'capture', answer: 'CONFIRMED/captured', payments: ['succeeded'], sends: true },
  { start: 'captured', step: 'capture', answer: 'CONFIRMED/captured', payments: ['succeeded'], sends: false },
  { start: 'declined', step: 'capture', answer: 'refused HoldDeclined', payments: ['requires_payment_method'], sends: false },
  { start: 'cancelled-authorized', step: 'capture', answer: 'refused HoldCancelled', payments: ['requires_capture'], sends: false },
  { start: 'cancelled-before-try', step: 'void', answer: 'CANCELLED/none', payments: [], sends: false },
  { start: 'cancelled-authorized', step: 'void', answer: 'CANCELLED/voided', payments: ['canceled'], sends: true },
  { start: 'voided', step: 'void', answer: 'CANCELLED/voided', payments: ['canceled'], sends: false },
  { start: 'authorized', step: 'void', answer: 'TRIED/authorized', payments: ['requires_capture'], sends: false },
  { start: 'captured', step: 'void', answer: 'CONFIRMED/captured', payments: ['succeeded'], sends: false },
  { start: 'declined', step: 'void', answer: 'DECLINED/declined', payments: ['requires_payment_method'], sends: false },
];

describe('the provider participant truth table', () => {
  for (const cell of table) {
    it(`${cell.step} on a charge ${cell.start}: ${cell.answer}, ${concurrentRuns} at once and once more`, async () => {
      const intent = await newCharge();
      await arrange(intent, cell.start);
      const sentBefore = requestsOf(intent);
      const answers = await Promise.all(Array.from({ length: concurrentRuns }, () => outcome(intent, cell.step)));
      answers.push(await outcome(intent, cell.step));
      expect(answers).toEqual(Array.from({ length: concurrentRuns + 1 }, () => cell.answer));
      expect(paymentsOf(intent).map((p) => p.status)).toEqual(cell.payments);
      if (!cell.sends) expect(requestsOf(intent) - sentBefore).toBe(0);
    });
  }

  it('a late authorization (Cancel committed between authorize begin and its answer) is voided at once, never left held', async () => {
    const intent = await newCharge();
    await tryProviderHold(h.pool, intent, 60_000);
    // The first attempt begins, sends, and its answer is lost (a 500 after the provider committed);
    // the ledger cancels meanwhile.
    await beginProviderAuthorize(h.pool, intent.tenant, intent.idempotencyKey);
    sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'error_after_commit', status: 500 }, idempotencyKeyPrefix: intent.chargeId });
    await expect(steps.authorizeAtProvider(intent)).rejects.toThrow();
    await cancelHold(h.pool, intent, 'requested_by_caller');
    // The compensation's void finds the authorization by our reference.
    const voided = await steps.voidAtProvider(intent.tenant, intent.idempotencyKey);
    expect(voided?.charge.provider?.state).toBe('voided');
    expect(paymentsOf(intent).map((p) => p.status)).toEqual(['canceled']);
  });

  it('Cancel is refused while a capture is unanswered, and allowed once the capture is refused for good', async () => {
    const intent = await newCharge();
    await tryProviderHold(h.pool, intent, 60_000);
    await steps.authorizeAtProvider(intent);
    await beginProviderCapture(h.pool, intent.tenant, intent.idempotencyKey);
    await expect(cancelHold(h.pool, intent, 'requested_by_caller')).rejects.toMatchObject({ refusal: 'providerCaptureInFlight' });
    // The authorization was voided at the provider behind our back: the capture is refused for good.
    sim.payments.cancel(paymentsOf(intent)[0]!.id, {});
    expect(await outcome(intent, 'capture')).toBe('refused ProviderCaptureRefused');
    const cancelled = await cancelHold(h.pool, intent, 'provider_capture_refused');
    expect(cancelled.holdState).toBe('CANCELLED');
    expect((await readCharge(h.pool, intent.tenant, intent.idempotencyKey))?.charge.provider?.state).toBe('voided');
  });

  it('a ledger charge is never sent to a provider', async () => {
    const tenant = await fundedTenant(h, { label: 'ptt-ledger' });
    const key = newKey();
    const intent = ledgerIntent(tenant, key, 'payer', 'payee', 500);
    await tryHold(h.pool, intent, 60_000);
    expect(await outcome(intent, 'authorize')).toBe('refused ProviderStepNotAllowed');
    expect(await outcome(intent, 'capture')).toBe('refused ProviderStepNotAllowed');
    expect(requestsOf(intent)).toBe(0);
  });

  it('the hold sweeper releasing a stranded provider hold voids its authorization too, once, also when retried', async () => {
    const intent = await newCharge();
    await tryProviderHold(h.pool, intent, 60_000);
    await steps.authorizeAtProvider(intent);
    const sweeper = createHoldSweeperActivities(h.pool, null, steps.voidAtProvider);
    const request = { tenant: intent.tenant, idempotencyKey: intent.idempotencyKey, reason: 'hold_orphaned', onlyIfOrphaned: false };
    const first = await sweeper.releaseHold(request);
    expect(first).toMatchObject({ released: true, charge: { status: 'cancelled' } });
    const again = await sweeper.releaseHold(request);
    expect(again.released).toBe(false);
    expect(paymentsOf(intent).map((p) => p.status)).toEqual(['canceled']);
    expect((await readCharge(h.pool, intent.tenant, intent.idempotencyKey))?.charge.provider?.state).toBe('voided');
  });
});
