import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ApiMetrics } from '../src/api/metrics.js';
import { LedgerReadings } from '../src/service/ledger-readings.js';
import type { Charge, ChargeIntent } from '../src/domain/charge.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { clearingAccountId } from '../src/domain/providers.js';
import { readCharge } from '../src/ledger/charges.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import { ChargeStateConflictError } from '../src/domain/errors.js';
import { chargeWorkflowType, type ChargePolicy, type ChargeWorkflowInput } from '../workflows/definitions.js';
import { chargeSearchAttributeKeys } from '../workflows/search-attributes.js';
import { fundedTenant, newKey, providerIntent, startTestWorker, testPolicy, useHarness, waitFor } from './support/harness.js';

/**
 * A provider that refuses every void, and a worker with no connector for the charge's provider, on
 * the real Temporal dev server, PostgreSQL and the Stripe simulator (docs/providers.md, "No
 * hanging"). Measured before: the caller's cancel answered 503 "no worker answered" (the update
 * waited for a void that never came), ChargeStatus stayed `reserved`, and a charge whose provider
 * had no connector retried its void for ever.
 */
const h = useHarness();
const taskQueue = `provider-void-${randomBytes(4).toString('hex')}`;
const unconfiguredQueue = `provider-none-${randomBytes(4).toString('hex')}`;
let sim: StripeSimulator;
let workers: Awaited<ReturnType<typeof startTestWorker>>[] = [];

/** What the API gives a cancel: one Temporal call timeout (src/api/app.ts, temporalCallTimeoutMs). */
const apiCallTimeoutMs = 5_000;
const policy: ChargePolicy = { ...testPolicy, providerStepStartToCloseMs: 10_000, providerAuthorizeBudgetMs: 20_000, providerVoidAlertAfterMs: 2_000 };

beforeAll(async () => {
  sim = await StripeSimulator.start({ port: 0 });
  const stripe = new StripeConnector({ apiKey: 'sk_test_void', webhookSecrets: ['whsec_void'], endpoint: sim.endpoint, maxNetworkRetries: 0, requestTimeoutMs: 2_000 });
  workers = [
    await startTestWorker({ taskQueue, pool: h.pool, providers: { stripe }, holdSweeper: false }),
    // The simulator off on this one: no connector for any provider.
    await startTestWorker({ taskQueue: unconfiguredQueue, pool: h.pool, providers: {}, holdSweeper: false }),
  ];
});

afterEach(() => sim.faults.clear());

afterAll(async () => {
  await Promise.all(workers.map((worker) => worker.stop()));
  await sim?.stop();
});

function start(intent: ChargeIntent, queue = taskQueue) {
  const input: ChargeWorkflowInput = { intent, policy };
  return h.temporal.workflow.start(chargeWorkflowType, { taskQueue: queue, workflowId: chargeWorkflowId(intent.tenant, intent.idempotencyKey), args: [input] });
}

function requestsFor(intent: ChargeIntent) {
  return sim.requests.filter((r) => r.idempotencyKey?.startsWith(intent.chargeId) || r.path.includes(intent.chargeId));
}

async function indexedStatus(intent: ChargeIntent): Promise<string | undefined> {
  const description = await h.temporal.workflow.getHandle(chargeWorkflowId(intent.tenant, intent.idempotencyKey)).describe();
  return description.typedSearchAttributes.get(chargeSearchAttributeKeys.status);
}

describe('a void the provider keeps refusing', () => {
  it('the cancel answers cancelling (not 503), ChargeStatus says cancelling, the gauge counts it; once the provider takes the void, cancelled', async () => {
    const tenant = await fundedTenant(h, { label: 'pv-fail' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa', { captureMode: 'manual' });
    const handle = await start(intent);
    await waitFor(async () => (await readCharge(h.pool, tenant, intent.idempotencyKey))?.charge.provider?.state === 'authorized', { what: 'authorized' });
    const paymentId = (await readCharge(h.pool, tenant, intent.idempotencyKey))!.charge.provider!.paymentId!;
    sim.addFault({ operation: 'cancel_payment_intent', fault: { kind: 'error_before_commit', status: 503 }, times: 100_000, idempotencyKeyPrefix: intent.chargeId });

    // The service as the API calls it: one Temporal call timeout.
    const service = h.clientFor({ taskQueue, policy });
    const cancelled = await service.cancelCharge(tenant, intent.idempotencyKey, { deadlineEpochMs: Date.now() + apiCallTimeoutMs });
    expect(cancelled).toMatchObject({ status: 'cancelling', amountHeldMinor: 0, provider: { state: 'authorized', paymentId } });
    // A repeat says the same; a capture now is refused with the reason, not left waiting.
    expect((await service.cancelCharge(tenant, intent.idempotencyKey, { deadlineEpochMs: Date.now() + apiCallTimeoutMs })).status).toBe('cancelling');
    const capture = await service.captureCharge(tenant, intent.idempotencyKey, null, { deadlineEpochMs: Date.now() + apiCallTimeoutMs }).catch((e: unknown) => e);
    expect(capture).toBeInstanceOf(ChargeStateConflictError);
    expect((await service.getCharge(tenant, intent.idempotencyKey)).status).toBe('cancelling');

    await waitFor(async () => (await indexedStatus(intent)) === 'cancelling', { what: 'ChargeStatus cancelling' });
    const metrics = new ApiMetrics({ defaultMetrics: false, readings: new LedgerReadings(h.pool) });
    const gauge = await metrics.registry.getSingleMetric('chargeguard_provider_voids_pending')!.get();
    expect(gauge.values[0]!.value).toBeGreaterThanOrEqual(1);
    // The money is released in the ledger; the provider still holds the card, and the void is retried.
    const clearing = await h.pool.query<{ pending_minor: string }>('SELECT pending_minor FROM account_balances WHERE tenant = $1 AND id = $2', [
      tenant,
      clearingAccountId('stripe', 'USD'),
    ]);
    expect(Number(clearing.rows[0]!.pending_minor)).toBe(0);
    expect(sim.payments.paymentIntents.get(paymentId)!.status).toBe('requires_capture');
    const attempts = () => requestsFor(intent).filter((r) => r.operation === 'cancel_payment_intent').length;
    const seen = attempts();
    await waitFor(async () => attempts() > seen, { what: 'the void retried', timeoutMs: 60_000 });

    sim.faults.clear();
    const result = (await handle.result()) as Charge;
    expect(result).toMatchObject({ status: 'cancelled', provider: { state: 'voided', paymentId } });
    expect(sim.payments.paymentIntents.get(paymentId)!.status).toBe('canceled');
    expect((await service.getCharge(tenant, intent.idempotencyKey)).status).toBe('cancelled');
  });
});

describe('a charge whose provider has no connector on the worker', () => {
  it('is decided at once, cancelled with provider_not_configured, after sending nothing to any provider', async () => {
    const tenant = await fundedTenant(h, { label: 'pv-none' });
    const intent = providerIntent(tenant, newKey(), 'pm_card_visa');
    const startedAt = Date.now();
    const handle = await start(intent, unconfiguredQueue);
    // Well inside the authorize budget (20 s): nothing was retried.
    const result = (await Promise.race([
      handle.result(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('the charge was not decided within 15 s')), 15_000)),
    ])) as Charge;
    expect(result).toMatchObject({ status: 'cancelled', failureReason: 'provider_not_configured', amountHeldMinor: 0 });
    expect(Date.now() - startedAt).toBeLessThan(15_000);
    const row = await readCharge(h.pool, tenant, intent.idempotencyKey);
    expect(row).toMatchObject({ holdState: 'CANCELLED', charge: { provider: { state: 'voided', paymentId: null } } });
    expect(requestsFor(intent)).toEqual([]);
  });
});
