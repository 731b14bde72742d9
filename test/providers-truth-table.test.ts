/**
 * The provider participant's truth table, at the connector level (the ledger's is in
 * docs/contract.md §5): authorize (the charge's own key again), capture and void (each with a fresh
 * key, as a step that has not run before) in every state a provider payment can be in.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AuthorizeRequest, type PaymentReference, providerIdempotencyKey } from '../src/providers/connector.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';

let sim: StripeSimulator;
let stripe: StripeConnector;

beforeAll(async () => {
  sim = await StripeSimulator.start();
  stripe = new StripeConnector({ apiKey: 'sk_test_table', webhookSecrets: ['whsec_test'], endpoint: sim.endpoint, maxNetworkRetries: 0 });
});
afterAll(async () => {
  await sim.stop();
});

type State = 'none' | 'requires_action' | 'authorized' | 'captured' | 'voided' | 'declined';

function authorizeRequest(reference: PaymentReference, paymentMethod: string): AuthorizeRequest {
  return { reference, amountMinor: 1_000, currency: 'USD', paymentMethod, idempotencyKey: providerIdempotencyKey(reference.chargeId, 'authorize') };
}

/** Brings a fresh charge's payment into `state`; returns its id (a made-up one for `none`). */
async function paymentIn(state: State): Promise<{ reference: PaymentReference; paymentId: string; paymentMethod: string }> {
  const reference = { tenant: 'tenant-t', chargeId: `ch_${randomUUID()}` };
  const paymentMethod =
    state === 'requires_action' ? 'pm_card_threeDSecure2Required' : state === 'declined' ? 'pm_card_visa_chargeDeclined' : 'pm_card_visa';
  if (state === 'none') return { reference, paymentId: 'pi_doesnotexist000000000000', paymentMethod };
  const result = await stripe.authorize(authorizeRequest(reference, paymentMethod));
  const paymentId = 'payment' in result && result.payment ? result.payment.id : '';
  if (state === 'captured') await stripe.capture({ paymentId, idempotencyKey: providerIdempotencyKey(reference.chargeId, 'capture') });
  if (state === 'voided') await stripe.void({ paymentId, idempotencyKey: providerIdempotencyKey(reference.chargeId, 'void') });
  return { reference, paymentId, paymentMethod };
}

/**
 * state → [authorize again, capture, void]. Authorize with the charge's key replays the first answer
 * whatever happened since (the key names that request, not the payment's state).
 */
const table: Record<State, [string, string, string]> = {
  none: ['authorized', 'rejected:not_found', 'rejected:not_found'],
  requires_action: ['requires_action', 'rejected:state_conflict', 'voided'],
  authorized: ['authorized', 'captured', 'voided'],
  captured: ['authorized', 'already_captured', 'rejected:state_conflict'],
  voided: ['authorized', 'rejected:state_conflict', 'already_voided'],
  declined: ['declined', 'rejected:state_conflict', 'voided'],
};

function label(result: { outcome: string; reason?: string }): string {
  return result.outcome === 'rejected' ? `rejected:${result.reason}` : result.outcome;
}

describe('provider truth table', () => {
  it.each(Object.entries(table) as [State, [string, string, string]][])('%s: authorize, capture, void → %j', async (state, [authorize, capture, voidOutcome]) => {
    const a = await paymentIn(state);
    expect(label(await stripe.authorize(authorizeRequest(a.reference, a.paymentMethod)))).toBe(authorize);
    const c = await paymentIn(state);
    expect(label(await stripe.capture({ paymentId: c.paymentId, idempotencyKey: `${c.reference.chargeId}:capture:fresh` }))).toBe(capture);
    const v = await paymentIn(state);
    expect(label(await stripe.void({ paymentId: v.paymentId, idempotencyKey: `${v.reference.chargeId}:void:fresh` }))).toBe(voidOutcome);
  });

  it('money moved only where a capture succeeded, and once: across the table, received = amount exactly for succeeded payments, 0 elsewhere', () => {
    const intents = [...sim.payments.paymentIntents.values()];
    expect(intents.filter((intent) => intent.status === 'succeeded').length).toBeGreaterThan(0);
    for (const intent of intents) expect(intent.amountReceived).toBe(intent.status === 'succeeded' ? intent.amount : 0);
  });
});
