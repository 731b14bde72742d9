import { StripeSimulator } from '../../src/providers/stripe/simulator/server.js';
import {
  providerBaselineWorkflowType,
  type ProviderBaselineInput,
} from '../baseline-workflow.js';
import { bodyChargeOperation, ChargeTally, providerChargeBody, settleUnsettled } from '../lib/charging.js';
import { detectLedgerStepKind } from '../lib/charge-shape.js';
import { measured, tenantFor, type BenchContext } from '../lib/context.js';
import { runInterleaved } from '../lib/interleave.js';
import { runClosedLoop, type Operation } from '../lib/load.js';
import { openPopulation, spreadPicker, type Population } from '../lib/population.js';
import { benchPolicy, openTemporalSession, type SessionOptions, type TemporalSession } from '../lib/session.js';
import { ratio } from '../lib/stats.js';
import { verifyScenario, type Verification } from '../lib/verify.js';
import type { ThroughputPoint } from './p1-throughput.js';

/** The simulator's delay before each API request when --provider-latency-ms does not say. */
export const defaultProviderLatencyMs = 20;
/** Closed-loop callers of P1-provider: P1's, less its N=128 (two provider calls per charge make each point slow). */
export const p1ProviderConcurrency: readonly number[] = [1, 8, 32];

/** The card every charge and every baseline payment uses: authorized at once by the simulator. */
const paymentMethod = 'pm_card_visa';
const amountMinor = 100;

export interface P1ProviderResult {
  /** The simulator's fixed delay before each API request, milliseconds (two requests per charge). */
  providerLatencyMs: number;
  points: ThroughputPoint[];
  /** How the baseline ran its first step: as ChargeWorkflow runs its ledger Try (read from a charge). */
  baselineFirstStepKind: 'local' | 'remote';
  /** The ledger: every invariant, one capture per succeeded charge. */
  verification: Verification;
  /** The provider: the simulator's own state read after the run. */
  provider: ProviderVerification;
}

export interface ProviderVerification {
  ok: boolean;
  /** The scenario's charges the ledger holds, and how many of them succeeded (CONFIRMED). */
  ledgerCharges: number;
  ledgerConfirmed: number;
  /** PaymentIntents carrying the scenario's tenant (the charges', not the baseline's). */
  paymentIntents: number;
  /** Charges with more than one PaymentIntent: must be 0. */
  chargesWithSeveralPayments: number;
  /** PaymentIntents not `succeeded` with the whole amount received: must be 0. */
  notCaptured: number;
  /** Capture requests the simulator executed (not replays) for those PaymentIntents. */
  capturesExecuted: number;
  /** PaymentIntents captured by more than one executed request: must be 0. */
  capturedMoreThanOnce: number;
  /** The baseline's PaymentIntents, all captured (a sanity check of the other arm). */
  baselinePaymentIntents: number;
  baselineNotCaptured: number;
  problems: string[];
}

/**
 * P1 with a provider in the loop: provider charges (a card, automatic capture) through the same
 * client path as P1, against the bare workflow of a provider charge's shape (baseline-workflow.ts,
 * BaselineProviderShapeWorkflow), both talking to one Stripe simulator that answers each API
 * request after a fixed delay. Its own session (the charge worker gets the simulator as its
 * `stripe` provider), its own task queues; interleaved A B B A at each concurrency as P1 is.
 */
export async function runP1Provider(
  ctx: BenchContext,
  sessionOptions: SessionOptions,
  options: { providerLatencyMs: number; concurrency: readonly number[] },
): Promise<P1ProviderResult> {
  const simulator = await StripeSimulator.start({ port: 0, responseDelayMs: options.providerLatencyMs });
  try {
    const session = await openTemporalSession(ctx.stack, { ...sessionOptions, stripeEndpoint: simulator.endpoint });
    try {
      const firstStepKind = await detectLedgerStepKind(ctx, session, 'provider');
      // No payer accounts: the card pays. The payees are spread so no two callers credit one account.
      const population = await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, 'p1-provider'), payers: 0, payees: 200 });
      const tally = new ChargeTally();
      const points: ThroughputPoint[] = [];
      for (const concurrency of options.concurrency) {
        points.push(await measurePoint(ctx, session, population, tally, { concurrency, baselineLocalFirstStep: firstStepKind === 'local' }));
      }
      await settleUnsettled(session.charges, population.tenant, tally);
      const verification = await verifyScenario(ctx.ledger, population.tenant, tally.succeeded);
      return {
        providerLatencyMs: options.providerLatencyMs,
        points,
        baselineFirstStepKind: firstStepKind,
        verification,
        provider: verifyAtProvider(simulator, population.tenant, verification),
      };
    } finally {
      await session.close();
    }
  } finally {
    await simulator.stop();
  }
}

async function measurePoint(
  ctx: BenchContext,
  session: TemporalSession,
  population: Population,
  tally: ChargeTally,
  options: { concurrency: number; baselineLocalFirstStep: boolean },
): Promise<ThroughputPoint> {
  const { settings } = ctx;
  const label = `p1-provider N=${options.concurrency}`;
  const keyPrefix = label.replace(/[^a-zA-Z0-9]+/g, '-');
  const maxOperations = 200_000;
  const payee = spreadPicker(population.payees, options.concurrency * 7);
  const { a: baseline, b: charge } = await runInterleaved(
    settings.durationMs,
    ({ index, durationMs, latencySinkMs }) =>
      measured(ctx, session, () =>
        runClosedLoop({
          label: `${label} baseline`,
          concurrency: options.concurrency,
          warmupMs: settings.warmupMs,
          durationMs,
          maxOperations,
          latencySinkMs,
          operation: baselineOperation(ctx, session, population, `${keyPrefix}-s${index}`, options.baselineLocalFirstStep),
        }),
      ),
    ({ index, durationMs, latencySinkMs }) =>
      measured(ctx, session, () =>
        runClosedLoop({
          label: `${label} charges`,
          concurrency: options.concurrency,
          warmupMs: settings.warmupMs,
          durationMs,
          maxOperations,
          latencySinkMs,
          operation: bodyChargeOperation(session.charges, {
            tenant: population.tenant,
            keyPrefix: `${keyPrefix}-s${index}`,
            body: (key, sequence) => providerChargeBody(key, payee(sequence), paymentMethod),
            tally,
          }),
        }),
      ),
  );
  // The provider's point leaves the machine's CPU unmeasured: its bare arm calls the same simulator.
  return {
    concurrency: options.concurrency,
    charge,
    baseline,
    ratio: ratio(charge.operationsPerSecond, baseline.operationsPerSecond),
    chargesPerMachineCpuSecond: null,
    baselinePerMachineCpuSecond: null,
  };
}

/** The baseline's tenant at the provider: its PaymentIntents are told apart from the charges' by it. */
function baselineTenantOf(tenant: string): string {
  return `${tenant}/baseline`;
}

/** One bare provider-shaped workflow, carrying the same intent a provider charge carries. */
function baselineOperation(
  ctx: BenchContext,
  session: TemporalSession,
  population: Population,
  keyPrefix: string,
  localFirstStep: boolean,
): Operation {
  const taskQueue = session.options.baselineTaskQueue;
  if (taskQueue === null) throw new Error('this session has no baseline worker');
  return async (sequence) => {
    const key = `${keyPrefix}-baseline-${sequence}`;
    const intent = session.charges.buildIntent(population.tenant, key, providerChargeBody(key, population.payees[0]!, paymentMethod));
    const input: ProviderBaselineInput = {
      payload: { intent, policy: benchPolicy },
      localActivities: localFirstStep,
      payment: { reference: { tenant: baselineTenantOf(population.tenant), chargeId: intent.chargeId }, amountMinor, currency: 'USD', paymentMethod },
    };
    await session.temporal.workflow.execute(providerBaselineWorkflowType, {
      taskQueue,
      workflowId: `bench-baseline/${ctx.runId}/${key}`,
      args: [input],
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
      ...(session.eagerStart ? { requestEagerStart: true } : {}),
    });
  };
}

const capturePath = /^\/v1\/payment_intents\/([^/?]+)\/capture/;

/**
 * What the provider holds for the scenario, read from the simulator's state: one PaymentIntent per
 * charge, each captured for the whole amount by exactly one executed capture request (a replay of
 * the same key is not a second capture), and as many as the ledger confirmed.
 */
function verifyAtProvider(simulator: StripeSimulator, tenant: string, ledger: Verification): ProviderVerification {
  const all = [...simulator.payments.paymentIntents.values()];
  const mine = all.filter((payment) => payment.metadata['tenant'] === tenant);
  const baseline = all.filter((payment) => payment.metadata['tenant'] === baselineTenantOf(tenant));
  const perCharge = new Map<string, number>();
  for (const payment of mine) {
    const chargeId = payment.metadata['charge_id'] ?? '';
    perCharge.set(chargeId, (perCharge.get(chargeId) ?? 0) + 1);
  }
  const captured = (payment: (typeof all)[number]): boolean => payment.status === 'succeeded' && payment.amountReceived === payment.amount;
  const executedCaptures = new Map<string, number>();
  for (const request of simulator.requests) {
    if (request.operation !== 'capture_payment_intent' || request.replayed || request.status !== 200) continue;
    const id = capturePath.exec(request.path)?.[1];
    if (id !== undefined) executedCaptures.set(id, (executedCaptures.get(id) ?? 0) + 1);
  }
  const capturesOfMine = mine.map((payment) => executedCaptures.get(payment.id) ?? 0);
  const result: Omit<ProviderVerification, 'ok' | 'problems'> = {
    ledgerCharges: ledger.chargeRows,
    ledgerConfirmed: ledger.confirmedRows,
    paymentIntents: mine.length,
    chargesWithSeveralPayments: [...perCharge.values()].filter((count) => count > 1).length,
    notCaptured: mine.filter((payment) => !captured(payment)).length,
    capturesExecuted: capturesOfMine.reduce((sum, count) => sum + count, 0),
    capturedMoreThanOnce: capturesOfMine.filter((count) => count > 1).length,
    baselinePaymentIntents: baseline.length,
    baselineNotCaptured: baseline.filter((payment) => !captured(payment)).length,
  };
  const problems: string[] = [];
  if (result.ledgerConfirmed !== result.ledgerCharges) problems.push(`${result.ledgerCharges - result.ledgerConfirmed} of ${result.ledgerCharges} charges did not succeed`);
  if (result.paymentIntents !== result.ledgerConfirmed) problems.push(`${result.paymentIntents} PaymentIntents for ${result.ledgerConfirmed} confirmed charges`);
  if (result.chargesWithSeveralPayments > 0) problems.push(`${result.chargesWithSeveralPayments} charges with more than one PaymentIntent`);
  if (result.notCaptured > 0) problems.push(`${result.notCaptured} PaymentIntents not captured in full`);
  if (result.capturesExecuted !== result.paymentIntents) problems.push(`${result.capturesExecuted} captures executed for ${result.paymentIntents} PaymentIntents`);
  if (result.capturedMoreThanOnce > 0) problems.push(`${result.capturedMoreThanOnce} PaymentIntents captured more than once`);
  if (result.baselineNotCaptured > 0) problems.push(`baseline: ${result.baselineNotCaptured} PaymentIntents not captured in full`);
  return { ...result, ok: problems.length === 0, problems };
}
