import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProviderActivities, type ProviderActivities } from '../activities/provider-activities.js';
import { createRefundActivities } from '../activities/refund-activities.js';
import type { ChargeIntent } from '../src/domain/charge.js';
import { cancelHold, readCharge } from '../src/ledger/charges.js';
import { beginProviderCapture, confirmProviderCapture, tryProviderHold } from '../src/ledger/provider-charges.js';
import { recordProviderRefunded, refundCharge } from '../src/ledger/refunds.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import { formatProviderReconcileReport, reconcileProvider, type ProviderReconcileReport } from '../src/reconcile/index.js';
import { exitCodes } from '../src/domain/error-kinds.js';
import { runCli } from './support/cli.js';
import { fundedTenant, newKey, newTenant, providerIntent, useHarness } from './support/harness.js';

/**
 * `reconcile --provider stripe` (docs/providers.md, Reconciliation) against the simulator and the
 * real ledger: one tenant per test, its charges brought to each state with the provider activities
 * and the ledger functions, and one finding made for each rule.
 */
const h = useHarness();
const graceMs = 60_000;
let sim: StripeSimulator;
let stripe: StripeConnector;
let steps: ProviderActivities;

beforeAll(async () => {
  sim = await StripeSimulator.start({ port: 0 });
  stripe = new StripeConnector({ apiKey: 'sk_test_rec', webhookSecrets: ['whsec_rec'], endpoint: sim.endpoint, maxNetworkRetries: 0, requestTimeoutMs: 2_000 });
  steps = createProviderActivities(h.pool, { stripe });
});

afterAll(async () => {
  await sim?.stop();
});

async function newCharge(tenant: string, paymentMethod = 'pm_card_visa', holdTtlMs = 60 * 60_000): Promise<ChargeIntent> {
  const intent = providerIntent(tenant, newKey(), paymentMethod, { captureMode: 'manual' });
  await tryProviderHold(h.pool, intent, holdTtlMs);
  return intent;
}

async function authorized(intent: ChargeIntent): Promise<string> {
  const row = await steps.authorizeAtProvider(intent);
  return row!.charge.provider!.paymentId!;
}

/** Past every grace: a decision made a moment ago is no longer "just decided". */
const later = (): number => Date.now() + 2 * graceMs;

function violationsOf(report: ProviderReconcileReport): Record<string, number> {
  return Object.fromEntries(report.checks.filter((c) => c.violations > 0).map((c) => [c.name, c.violations]));
}

describe('reconcile --provider stripe', () => {
  it('finds nothing wrong when every charge and payment agree (captured, refunded, voided, declined, held within its TTL)', async () => {
    const tenant = await fundedTenant(h, { label: 'prec' });
    const captured = await newCharge(tenant);
    await authorized(captured);
    await steps.captureAtProvider(tenant, captured.idempotencyKey, null);
    const refundIntent = h.client.buildRefundIntent(tenant, captured.idempotencyKey, newKey('refund'), { amount: 300 });
    await createRefundActivities(h.pool, {}, { stripe }).refundCharge(refundIntent);

    const voided = await newCharge(tenant);
    await authorized(voided);
    await cancelHold(h.pool, voided, 'requested_by_caller');
    await steps.voidAtProvider(tenant, voided.idempotencyKey);

    await steps.authorizeAtProvider(await newCharge(tenant, 'pm_card_visa_chargeDeclined'));
    await authorized(await newCharge(tenant));

    const report = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, nowMs: later() });
    expect(violationsOf(report), formatProviderReconcileReport(report)).toEqual({});
    expect(report.ok).toBe(true);
    expect(report.counts).toMatchObject({ payments: 4, charges: 4, refunds: 1 });
    expect(report.checks.map((c) => c.name)).toEqual([
      'provider_payments_have_charges',
      'provider_one_payment_per_charge',
      'provider_captures_match_ledger',
      'provider_amounts_within_charge',
      'provider_no_orphan_authorizations',
      'provider_refunds_agree',
    ]);
  });

  it('reports a payment with our reference and no charge row, and never voids it', async () => {
    const tenant = newTenant('prec');
    const made = await stripe.authorize({ reference: { tenant, chargeId: 'ch_not_in_ledger' }, amountMinor: 500, currency: 'USD', paymentMethod: 'pm_card_visa', idempotencyKey: newKey() });
    expect(made.outcome).toBe('authorized');
    const report = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, voidOrphans: true, nowMs: later() });
    expect(violationsOf(report)).toEqual({ provider_payments_have_charges: 1 });
    expect(report.voided).toEqual([]);
    expect(sim.payments.paymentIntents.get((made as { payment: { id: string } }).payment.id)!.status).toBe('requires_capture');
  });

  it('reports a charge with two payments', async () => {
    const tenant = await fundedTenant(h, { label: 'prec' });
    const intent = await newCharge(tenant);
    await authorized(intent);
    // A second PaymentIntent for the same charge under another key: what a lost key would cause.
    await stripe.authorize({ reference: { tenant, chargeId: intent.chargeId }, amountMinor: 1_000, currency: 'USD', paymentMethod: 'pm_card_visa', idempotencyKey: newKey() });
    const report = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant });
    expect(violationsOf(report)).toEqual({ provider_one_payment_per_charge: 1 });
    expect(report.checks.find((c) => c.name === 'provider_one_payment_per_charge')!.samples[0]).toMatchObject({ chargeId: intent.chargeId, problem: '2 payments' });
  });

  it('reports a capture whose amount differs from the ledger, and a payment captured for a cancelled charge', async () => {
    const tenant = await fundedTenant(h, { label: 'prec' });
    const partly = await newCharge(tenant);
    const partlyPayment = await authorized(partly);
    await beginProviderCapture(h.pool, tenant, partly.idempotencyKey);
    expect((await stripe.capture({ paymentId: partlyPayment, idempotencyKey: newKey() })).outcome).toBe('captured');
    await confirmProviderCapture(h.pool, tenant, partly.idempotencyKey, 400);

    const cancelled = await newCharge(tenant);
    const cancelledPayment = await authorized(cancelled);
    expect((await stripe.capture({ paymentId: cancelledPayment, idempotencyKey: newKey() })).outcome).toBe('captured');
    await cancelHold(h.pool, cancelled, 'requested_by_caller');

    const report = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant });
    // Both received more than the ledger captured from them: a capture above the charge's too.
    expect(violationsOf(report)).toEqual({ provider_captures_match_ledger: 2, provider_amounts_within_charge: 2 });
    expect(JSON.stringify(report.checks.find((c) => c.name === 'provider_captures_match_ledger')!.samples)).toContain('the ledger captured 400 USD');
  });

  it('reports a capture above the charge: the provider received more than the ledger captured, or was asked for more than the charge', async () => {
    const tenant = await fundedTenant(h, { label: 'prec' });
    const over = await newCharge(tenant);
    const overPayment = await authorized(over);
    await steps.captureAtProvider(tenant, over.idempotencyKey, null);
    const clean = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, nowMs: later() });
    expect(violationsOf(clean), formatProviderReconcileReport(clean)).toEqual({});
    // What a capture above the charge leaves at the provider: the charge is 1,000, the ledger captured 1,000.
    const record = sim.payments.paymentIntents.get(overPayment)!;
    Object.assign(record, { amount: 1_500, amountReceived: 1_500 });
    // And a payment for more than its charge, still held.
    const big = await newCharge(tenant);
    const bigPayment = await authorized(big);
    Object.assign(sim.payments.paymentIntents.get(bigPayment)!, { amount: 2_000, amountCapturable: 2_000 });

    const report = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, nowMs: Date.now() });
    expect(violationsOf(report)).toMatchObject({ provider_amounts_within_charge: 2 });
    const samples = report.checks.find((c) => c.name === 'provider_amounts_within_charge')!.samples as { paymentId: string; problem: string }[];
    expect(Object.fromEntries(samples.map((sample) => [sample.paymentId, sample.problem]))).toEqual({
      [overPayment]: 'received 1500 USD at the provider; the ledger captured 1000 USD from it (the charge is 1000)',
      [bigPayment]: 'for 2000 USD at the provider; the charge is 1000 USD',
    });
    expect(formatProviderReconcileReport(report)).toContain('✗ provider_amounts_within_charge');
  });

  it('judges an automatic 3-D Secure charge waiting for its payer against its payer-action deadline (creation plus the hold TTL): no finding before it, an orphan after it, never voided while held', async () => {
    const tenant = await fundedTenant(h, { label: 'prec' });
    const holdTtlMs = 30 * 60_000;
    const intent = providerIntent(tenant, newKey(), 'pm_card_threeDSecure2Required', { captureMode: 'automatic' });
    await tryProviderHold(h.pool, intent, holdTtlMs);
    const waiting = await steps.authorizeAtProvider(intent);
    expect(waiting!.charge.status).toBe('requires_action');
    expect(waiting!.charge.holdExpiresAt).toBeNull();
    const paymentId = waiting!.charge.provider!.paymentId!;
    const createdMs = Date.parse(waiting!.charge.createdAt);

    // Minutes into the payer's 30: before, every automatic 3-D Secure charge waiting over 60 s was an orphan.
    for (const nowMs of [later(), createdMs + holdTtlMs - 1_000, createdMs + holdTtlMs + graceMs - 1_000]) {
      const within = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, holdTtlMs, voidOrphans: true, nowMs });
      expect(violationsOf(within), formatProviderReconcileReport(within)).toEqual({});
      expect(within.voided).toEqual([]);
    }
    // Past the deadline and its grace, the workflow should have given up: reported, and (the
    // charge still TRIED, its workflow may yet act) left for it, not voided by reconcile.
    const past = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, holdTtlMs, voidOrphans: true, nowMs: createdMs + holdTtlMs + 2 * graceMs });
    expect(violationsOf(past)).toEqual({ provider_no_orphan_authorizations: 1 });
    expect(past.checks.find((c) => c.name === 'provider_no_orphan_authorizations')!.samples[0]).toMatchObject({ paymentId, holdState: 'TRIED', status: 'requires_action' });
    expect(past.voided).toEqual([]);
    expect(sim.payments.paymentIntents.get(paymentId)!.status).toBe('requires_action');
  });

  it("--void-orphans voids a succeeded charge's duplicate PaymentIntent with a key of its own, never the captured one, and a rerun does nothing more", async () => {
    const tenant = await fundedTenant(h, { label: 'prec' });
    const intent = await newCharge(tenant);
    const captured = await authorized(intent);
    await steps.captureAtProvider(tenant, intent.idempotencyKey, null);
    // A second PaymentIntent for the charge, found by its metadata (tenant, charge id): what a lost key would leave.
    const made = await stripe.authorize({ reference: { tenant, chargeId: intent.chargeId }, amountMinor: 1_000, currency: 'USD', paymentMethod: 'pm_card_visa', idempotencyKey: newKey() });
    expect(made.outcome).toBe('authorized');
    const duplicate = (made as { payment: { id: string } }).payment.id;

    const report = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, voidOrphans: true, nowMs: later() });
    expect(violationsOf(report)).toEqual({ provider_one_payment_per_charge: 1, provider_no_orphan_authorizations: 1 });
    expect(report.checks.find((c) => c.name === 'provider_no_orphan_authorizations')!.samples[0]).toMatchObject({ paymentId: duplicate, holdState: 'CONFIRMED', duplicateOf: captured });
    expect(report.voided).toEqual([{ tenant, chargeId: intent.chargeId, paymentId: duplicate, duplicate: true, outcome: 'voided', recorded: false, detail: null }]);
    expect(formatProviderReconcileReport(report)).toContain(`void       ${duplicate} (a duplicate) of charge ${intent.chargeId}`);
    expect(sim.payments.paymentIntents.get(duplicate)!.status).toBe('canceled');
    expect(sim.payments.paymentIntents.get(captured)!.status).toBe('succeeded');
    const cancels = sim.requests.filter((r) => r.operation === 'cancel_payment_intent' && r.path.includes(duplicate));
    expect(cancels.map((r) => r.idempotencyKey)).toEqual([`${duplicate}:void`]);
    expect(sim.requests.some((r) => r.operation === 'cancel_payment_intent' && r.path.includes(captured))).toBe(false);
    // The charge is untouched: still succeeded with its captured payment recorded.
    expect((await readCharge(h.pool, tenant, intent.idempotencyKey))!.charge).toMatchObject({ status: 'succeeded', provider: { state: 'captured', paymentId: captured } });

    const again = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, voidOrphans: true, nowMs: later() });
    expect(violationsOf(again)).toEqual({ provider_one_payment_per_charge: 1 });
    expect(again.voided).toEqual([]);
    expect(sim.requests.filter((r) => r.operation === 'cancel_payment_intent' && r.path.includes(duplicate))).toHaveLength(1);
  });

  it('reports a refund the ledger recorded that the provider does not have', async () => {
    const tenant = await fundedTenant(h, { label: 'prec' });
    const intent = await newCharge(tenant);
    await authorized(intent);
    await steps.captureAtProvider(tenant, intent.idempotencyKey, null);
    const refundIntent = h.client.buildRefundIntent(tenant, intent.idempotencyKey, newKey('refund'), { amount: 200 });
    await refundCharge(h.pool, refundIntent);
    await recordProviderRefunded(h.pool, refundIntent, 're_never_made');
    const report = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant });
    expect(violationsOf(report)).toEqual({ provider_refunds_agree: 1 });
  });

  it('reports an authorization held past its charge TTL, and one of a cancelled charge; --void-orphans voids only the cancelled one, and the next run is clean of it', async () => {
    const tenant = await fundedTenant(h, { label: 'prec' });
    const expired = await newCharge(tenant, 'pm_card_visa', 1_000);
    const expiredPayment = await authorized(expired);
    const orphan = await newCharge(tenant);
    const orphanPayment = await authorized(orphan);
    await cancelHold(h.pool, orphan, 'requested_by_caller');

    // Just cancelled: the compensation may be voiding it now, so it is not an orphan yet.
    const early = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, voidOrphans: true });
    expect(early.voided).toEqual([]);

    const report = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, voidOrphans: true, nowMs: later() });
    expect(violationsOf(report)).toEqual({ provider_no_orphan_authorizations: 2 });
    expect(report.voided).toEqual([{ tenant, chargeId: orphan.chargeId, paymentId: orphanPayment, duplicate: false, outcome: 'voided', recorded: true, detail: null }]);
    expect(formatProviderReconcileReport(report)).toContain(`void       ${orphanPayment} of charge ${orphan.chargeId}`);
    expect(sim.payments.paymentIntents.get(orphanPayment)!.status).toBe('canceled');
    expect(sim.payments.paymentIntents.get(expiredPayment)!.status).toBe('requires_capture');
    expect(sim.requests.find((r) => r.operation === 'cancel_payment_intent' && r.path.includes(orphanPayment))!.idempotencyKey).toBe(`${orphan.chargeId}:void`);
    expect((await readCharge(h.pool, tenant, orphan.idempotencyKey))!.charge.provider).toMatchObject({ state: 'voided', paymentId: orphanPayment });

    const again = await reconcileProvider({ ledger: h.pool, connector: stripe, tenant, voidOrphans: true, nowMs: later() });
    expect(violationsOf(again)).toEqual({ provider_no_orphan_authorizations: 1 });
    expect(again.voided).toEqual([]);

    // No workflow or sweeper owns this hold: released here, as the sweeper would, so a ledger-wide
    // reconcile later in the run (test/reconcile.test.ts reads every tenant) finds no expired hold.
    expect((await cancelHold(h.pool, expired, 'hold_expired')).holdState).toBe('CANCELLED');
  });

  it('refuses a window outside 1-720 hours before reading anything', async () => {
    await expect(reconcileProvider({ ledger: h.pool, connector: stripe, windowHours: 721 })).rejects.toThrow('--window-hours must be a whole number of hours from 1 to 720');
    await expect(reconcileProvider({ ledger: h.pool, connector: stripe, windowHours: 0 })).rejects.toThrow('--window-hours');
  });
});

describe('the command', () => {
  const stripeEnv = (): Record<string, string> => ({ STRIPE_API_KEY: 'sk_test_cli', STRIPE_API_BASE: sim.url, STRIPE_WEBHOOK_SECRETS: 'whsec_cli' });

  it('exits 1 on findings, voids orphans with --void-orphans and says so, and exits 0 once clean', async () => {
    const tenant = await fundedTenant(h, { label: 'prec' });
    const orphan = await newCharge(tenant);
    const orphanPayment = await authorized(orphan);
    await cancelHold(h.pool, orphan, 'requested_by_caller');
    // Made to look decided long ago, as a real orphan is when reconcile runs.
    await h.pool.query(`UPDATE charges SET updated_at = now() - interval '1 hour' WHERE tenant = $1 AND idempotency_key = $2`, [tenant, orphan.idempotencyKey]);

    const first = await runCli(['reconcile', '--provider', 'stripe', '--tenant', tenant, '--void-orphans'], stripeEnv());
    expect(first.code, first.stderr).toBe(1);
    expect(first.stdout).toContain('✗ provider_no_orphan_authorizations');
    expect(first.stdout).toContain(`void       ${orphanPayment} of charge ${orphan.chargeId} (tenant ${tenant}): voided, recorded on the charge`);

    const second = await runCli(['reconcile', '--provider', 'stripe', '--tenant', tenant, '--json'], stripeEnv());
    expect(second.code, second.stderr).toBe(0);
    expect(second.json).toMatchObject({ ok: true, provider: 'stripe', tenant, window: { hours: 48 }, voided: [] });
  });

  it('names the flag or the variable at fault, with the usage exit code', async () => {
    const bounded = await runCli(['reconcile', '--provider', 'stripe', '--window-hours', '1000'], stripeEnv());
    expect(bounded.code).toBe(exitCodes.invalid);
    expect(bounded.stderr).toContain('--window-hours must be a whole number of hours from 1 to 720');
    const unconfigured = await runCli(['reconcile', '--provider', 'stripe'], { STRIPE_API_KEY: undefined, STRIPE_API_KEY_FILE: undefined, STRIPE_WEBHOOK_SECRETS: undefined });
    expect(unconfigured.code).toBe(exitCodes.invalid);
    expect(unconfigured.stderr).toContain('no stripe connector is configured');
    const badBase = await runCli(['reconcile', '--provider', 'stripe'], { ...stripeEnv(), STRIPE_API_BASE: 'ftp://example' });
    expect(badBase.code).toBe(exitCodes.invalid);
    expect(badBase.stderr).toContain('STRIPE_API_BASE: must be http or https');
    const orphanFlag = await runCli(['reconcile', '--void-orphans']);
    expect(orphanFlag.code).toBe(exitCodes.invalid);
    expect(orphanFlag.stderr).toContain('need --provider');
  });
});
