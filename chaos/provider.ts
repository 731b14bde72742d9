/**
 * The provider mode of a chaos run (`npm run chaos -- --provider`): the stateful Stripe simulator is
 * the payment provider of every worker and API process, a share of the storm's keys are card
 * charges, the simulator loses answers, fails and times out all through the storm, and the verdict
 * looks at the provider's own state beside the ledger's: one PaymentIntent per charge, one capture,
 * nothing left held, and `reconcile --provider stripe` clean.
 */
import { randomBytes } from 'node:crypto';
import { fromRow, type ChargeRow, type LedgerCharge } from '../src/ledger/charges.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import { reconcileProvider } from '../src/reconcile/provider.js';
import type { FaultRuleInput, Operation } from '../src/providers/stripe/simulator/faults.js';
import type { PaymentIntentRecord } from '../src/providers/stripe/simulator/payments.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { StripeConnector, stripeRequestTimeoutMs } from '../src/providers/stripe/connector.js';
import { pollUntil } from '../src/support/wait.js';
import type { AnswerCounts, KeyRecord, Storm } from './storm.js';

const chaosStripeApiKey = 'sk_test_chargeguard_chaos';
/** Events reach the receiver this long after the change, each twice: late and repeated, as Stripe may deliver them. */
const webhookDeliveryDelayMs = 300;
/** The operations whose faults the run arms: the ones that move or hold money. */
const faultOperations: readonly Operation[] = ['create_payment_intent', 'capture_payment_intent', 'cancel_payment_intent'];
/** One armed rule strikes 1 to this many requests. */
const faultTimesMax = 3;
/** A held answer outlasts the connector's per-attempt timeout: the worker gives up on it and sends the same key again. */
export const providerHoldPastTimeoutMs = stripeRequestTimeoutMs + 2_000;
/**
 * After the storm settled, how long compensations still voiding at the provider may take before
 * what is left held counts against the run (a void is retried with backoff, 30 s at most apart).
 */
const providerSettleTimeoutMs = 90_000;

export interface ChaosProvider {
  simulator: StripeSimulator;
  /** What every worker and API process gets: the connector's configuration, pointed at the simulator. */
  env: Record<string, string>;
  /** The connector the verdict's reconciliation uses (the same configuration). */
  connector: StripeConnector;
  /** Sends the simulator's signed events to this API's receiver. */
  deliverEventsTo(apiUrl: string): void;
  stop(): Promise<void>;
}

export async function startChaosProvider(): Promise<ChaosProvider> {
  const simulator = await StripeSimulator.start({ port: 0 });
  // A secret of this run only: the simulator signs with it, the API processes verify with it.
  const webhookSecret = `whsec_${randomBytes(24).toString('hex')}`;
  return {
    simulator,
    env: { STRIPE_API_KEY: chaosStripeApiKey, STRIPE_API_BASE: simulator.url, STRIPE_WEBHOOK_SECRETS: webhookSecret },
    connector: new StripeConnector({ apiKey: chaosStripeApiKey, webhookSecrets: [webhookSecret], endpoint: simulator.endpoint }),
    deliverEventsTo: (apiUrl) =>
      simulator.configureWebhooks({ url: `${apiUrl}/v1/provider-events/stripe`, secrets: [webhookSecret], duplicate: true, deliveryDelayMs: webhookDeliveryDelayMs }),
    stop: () => simulator.stop(),
  };
}

export interface ArmedProviderFault {
  atMs: number;
  operation: Operation;
  kind: string;
  times: number;
}

function pick<T>(items: readonly T[]): T {
  return items[Math.floor(Math.random() * items.length)]!;
}

const serverErrors = [500, 502, 503, 504] as const;

/** One random rule: a lost answer, a 5xx before or after the provider acted, a 429, or an answer held past the timeout. */
export function randomProviderFault(): FaultRuleInput {
  const operation = pick(faultOperations);
  const times = 1 + Math.floor(Math.random() * faultTimesMax);
  const kinds: FaultRuleInput['fault'][] = [
    { kind: 'drop_after_commit' },
    { kind: 'error_after_commit', status: pick(serverErrors) },
    { kind: 'error_before_commit', status: pick(serverErrors) },
    { kind: 'rate_limit' },
    { kind: 'hold_after_commit', holdMs: providerHoldPastTimeoutMs },
  ];
  const fault = pick(kinds);
  // One held answer at a time is enough to time the worker out; several would stall most charges for 20 s.
  return { operation, fault, times: fault.kind === 'hold_after_commit' ? 1 : times };
}

/** Arms a random simulator fault every `everyMs` until the storm ends; the caller clears what is left. */
export async function armProviderFaults(
  simulator: StripeSimulator,
  options: { startedAtMs: number; durationMs: number; everyMs: number; log: (line: string) => void },
): Promise<ArmedProviderFault[]> {
  const armed: ArmedProviderFault[] = [];
  for (let atMs = options.everyMs; atMs < options.durationMs; atMs += options.everyMs) {
    const waitMs = options.startedAtMs + atMs - Date.now();
    if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
    const rule = randomProviderFault();
    simulator.addFault(rule);
    armed.push({ atMs, operation: rule.operation!, kind: rule.fault.kind, times: rule.times ?? 1 });
  }
  options.log(`${armed.length} simulator faults armed`);
  return armed;
}

export interface CancelledSample {
  key: string;
  reason: string;
  paymentMethod: string;
  payerActed: string | null;
  createdAt: string;
  holdExpiresAt: string | null;
  updatedAt: string;
  paymentId: string | null;
  paymentStatus: string | null;
}

/**
 * A 3-D Secure charge whose payer authenticated and which ended cancelled: what the ledger, the
 * provider and the receiver saw of it, to say why. Times in ms from the charge's creation.
 */
export interface AuthenticatedThenCancelled {
  key: string;
  /** Created with capture "manual" (the storm captures it once reserved), or null: automatic. */
  manual: 'capture' | 'cancel' | null;
  /** The ledger's failure_reason. */
  failureReason: string | null;
  paymentStatus: string | null;
  payerActedAfterMs: number | null;
  /** The ledger row's last change (the cancellation, or the void recorded after it). */
  lastChangeAfterMs: number | null;
  /** The receiver's answer to each delivery of this payment's events: `payment_intent.requires_capture 503 +1.2 s`. */
  deliveries: string[];
  /** The simulator's answers to requests that named this payment, the faults that struck them named. */
  requests: string[];
}

/** How many unasked cancellations the verdict describes one by one. */
const cancelledSampleLimit = 10;

export interface ProviderVerdict {
  /** Keys the storm sent as card charges, and the ledger's provider charges. */
  cardKeys: number;
  providerCharges: number;
  paymentIntents: number;
  /** PaymentIntents by their status at the end. */
  paymentIntentStatuses: Record<string, number>;
  /** Charges with more than one PaymentIntent carrying their reference. */
  chargesWithTwoPaymentIntents: number;
  /** PaymentIntents captured more than once (two succeeded events), or of more than their charge's amount. */
  capturedTwice: number;
  capturedAboveCharge: number;
  /** `requires_capture` left for a charge the ledger decided (or has no row for). */
  authorizationsLeftHeld: number;
  /** `requires_action` left for a charge not waiting for its payer within its hold. */
  payerActionsLeft: number;
  /** How long after the storm settled the provider's state took to stop changing for decided charges. */
  settledAfterMs: number;
  providerReconcileOk: boolean;
  providerReconcileFailed: string[];
  /** Simulator faults armed, and requests they struck, by kind. */
  faultsArmed: number;
  faultsStruck: Record<string, number>;
  /** The receiver's answers to the simulator's deliveries (the simulator does not redeliver). */
  webhookDeliveries: AnswerCounts;
  payerAnswers: AnswerCounts;
  /** Card keys that ended cancelled without the storm asking, by failure_reason. */
  cancelledByReason: Record<string, number>;
  /** 3-D Secure keys whose payer authenticated successfully and that still ended cancelled, the caller not having asked. */
  authenticatedThenCancelled: number;
  /** Each of them, with what the ledger, the provider and the receiver saw. */
  authenticatedThenCancelledCharges: AuthenticatedThenCancelled[];
  /** Card keys that ended cancelled without the storm asking: what the ledger and the provider have of each (a few). */
  cancelledSamples: CancelledSample[];
  /** Manual-capture card keys: reserved, then captured or cancelled by the storm (or refused, or never answered). */
  manual: { reserved: number; captured: number; cancelled: number; refused: number; unanswered: number };
  /** What the API answered those captures and cancels. */
  settleAnswers: AnswerCounts;
  problems: string[];
}

function tally(values: Iterable<string>): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const value of values) counts[value] = (counts[value] ?? 0) + 1;
  return counts;
}

interface ProviderState {
  intents: PaymentIntentRecord[];
  charges: Map<string, LedgerCharge>;
  authorizationsLeftHeld: PaymentIntentRecord[];
  payerActionsLeft: PaymentIntentRecord[];
}

async function readProviderState(simulator: StripeSimulator, pool: LedgerPool, tenant: string): Promise<ProviderState> {
  const intents = [...simulator.payments.paymentIntents.values()].filter((intent) => intent.metadata['tenant'] === tenant);
  const { rows } = await pool.query<ChargeRow>('SELECT * FROM charges WHERE tenant = $1 AND provider IS NOT NULL', [tenant]);
  const charges = new Map(rows.map((row) => [row.id, fromRow(row)]));
  const chargeOf = (intent: PaymentIntentRecord): LedgerCharge | undefined => charges.get(intent.metadata['charge_id'] ?? '');
  const nowMs = Date.now();
  const waitingForPayer = (charge: LedgerCharge | undefined): boolean =>
    charge !== undefined && charge.holdState === 'TRIED' && charge.charge.holdExpiresAt !== null && Date.parse(charge.charge.holdExpiresAt) > nowMs;
  return {
    intents,
    charges,
    authorizationsLeftHeld: intents.filter((intent) => intent.status === 'requires_capture' && chargeOf(intent)?.holdState !== 'TRIED'),
    payerActionsLeft: intents.filter((intent) => intent.status === 'requires_action' && !waitingForPayer(chargeOf(intent))),
  };
}

/**
 * The provider's side of the verdict, once the storm settled: waits (up to providerSettleTimeoutMs)
 * for compensations still voiding, then compares the simulator's payments with the ledger.
 */
export async function providerVerdict(p: {
  provider: ChaosProvider;
  pool: LedgerPool;
  tenant: string;
  storm: Storm;
  armed: readonly ArmedProviderFault[];
  /** The workers' HOLD_TTL_MS: an automatic charge's payer-action deadline is its creation plus this. */
  holdTtlMs: number;
}): Promise<ProviderVerdict> {
  const { simulator } = p.provider;
  const waitStartedMs = Date.now();
  let state = await readProviderState(simulator, p.pool, p.tenant);
  await pollUntil(
    async () => {
      state = await readProviderState(simulator, p.pool, p.tenant);
      return state.authorizationsLeftHeld.length === 0 && state.payerActionsLeft.length === 0;
    },
    { deadlineMs: Date.now() + providerSettleTimeoutMs, intervalMs: 500 },
  );
  const settledAfterMs = Date.now() - waitStartedMs;

  const byCharge = new Map<string, PaymentIntentRecord[]>();
  for (const intent of state.intents) {
    const chargeId = intent.metadata['charge_id'] ?? '';
    byCharge.set(chargeId, [...(byCharge.get(chargeId) ?? []), intent]);
  }
  const chargesWithTwo = [...byCharge.entries()].filter(([, intents]) => intents.length > 1);
  const succeededEvents = tally(
    simulator.webhooks.events
      .filter((event) => event.type === 'payment_intent.succeeded')
      .map((event) => (JSON.parse(event.payload) as { data: { object: { id: string } } }).data.object.id),
  );
  const capturedTwice = state.intents.filter((intent) => (succeededEvents[intent.id] ?? 0) > 1);
  const capturedAbove = state.intents.filter((intent) => {
    const charge = state.charges.get(intent.metadata['charge_id'] ?? '');
    return intent.amountReceived > (charge?.charge.amountMinor ?? 0);
  });

  const report = await reconcileProvider({ ledger: p.pool, connector: p.provider.connector, tenant: p.tenant, graceMs: 0, holdTtlMs: p.holdTtlMs });
  const reconcileFailed = report.checks.filter((check) => check.violations > 0);

  const cardRecords = [...p.storm.keys.values()].filter((record) => record.paymentMethod !== null);
  const struck = simulator.requests.filter((request) => request.fault !== null).map((request) => `${request.operation} ${request.fault}`);
  const sample = (intents: PaymentIntentRecord[]): string => intents.slice(0, 3).map((intent) => `${intent.id} of ${intent.metadata['charge_id']}`).join(', ');

  const problems: string[] = [];
  if (chargesWithTwo.length > 0) problems.push(`${chargesWithTwo.length} charges with two PaymentIntents, e.g. ${chargesWithTwo.slice(0, 3).map(([id]) => id).join(', ')}`);
  if (capturedTwice.length > 0) problems.push(`${capturedTwice.length} PaymentIntents captured twice, e.g. ${sample(capturedTwice)}`);
  if (capturedAbove.length > 0) problems.push(`${capturedAbove.length} PaymentIntents captured above their charge's amount, e.g. ${sample(capturedAbove)}`);
  if (state.authorizationsLeftHeld.length > 0) {
    problems.push(`${state.authorizationsLeftHeld.length} authorizations left requires_capture for a decided charge, e.g. ${sample(state.authorizationsLeftHeld)}`);
  }
  if (state.payerActionsLeft.length > 0) {
    problems.push(`${state.payerActionsLeft.length} PaymentIntents left requires_action past their charge's hold, e.g. ${sample(state.payerActionsLeft)}`);
  }
  if (!report.ok) {
    problems.push(`reconcile --provider stripe: ${reconcileFailed.map((check) => `${check.name} (${check.violations}, e.g. ${JSON.stringify(check.samples[0])})`).join('; ')}`);
  }
  if (cardRecords.length === 0) problems.push('the storm sent no card charge');
  const reserved = cardRecords.filter((record) => record.manual !== null && record.outcomes.has('reserved'));
  const unanswered = reserved.filter((record) => record.settled === null);
  if (unanswered.length > 0) {
    problems.push(`${unanswered.length} manual charges whose capture or cancel was never answered, e.g. ${unanswered.slice(0, 3).map((record) => `${record.key} (${record.manual})`).join(', ')}`);
  }
  const refused = reserved.filter((record) => record.settled?.startsWith('refused') === true);

  const chargesByKey = new Map([...state.charges.values()].map((charge) => [charge.charge.idempotencyKey, charge]));
  const cancelledSamples = cardRecords
    .filter((record) => record.outcomes.has('cancelled') && record.manual !== 'cancel')
    .slice(0, cancelledSampleLimit)
    .map((record): CancelledSample => {
      const charge = chargesByKey.get(record.key)?.charge;
      const paymentId = charge?.provider?.paymentId ?? record.paymentId;
      return {
        key: record.key,
        reason: [...record.cancelReasons].join(', '),
        paymentMethod: record.paymentMethod!,
        payerActed: record.payerActed,
        createdAt: charge?.createdAt ?? '',
        holdExpiresAt: charge?.holdExpiresAt ?? null,
        updatedAt: charge?.updatedAt ?? '',
        paymentId,
        paymentStatus: paymentId === null ? null : (simulator.payments.paymentIntents.get(paymentId)?.status ?? null),
      };
    });

  const authenticatedThenCancelled = authenticatedThenCancelledUnasked(cardRecords).map((record) => describeAuthenticatedThenCancelled(simulator, chargesByKey.get(record.key)?.charge, record));

  return {
    cancelledSamples,
    cardKeys: cardRecords.length,
    providerCharges: state.charges.size,
    paymentIntents: state.intents.length,
    paymentIntentStatuses: tally(state.intents.map((intent) => intent.status)),
    chargesWithTwoPaymentIntents: chargesWithTwo.length,
    capturedTwice: capturedTwice.length,
    capturedAboveCharge: capturedAbove.length,
    authorizationsLeftHeld: state.authorizationsLeftHeld.length,
    payerActionsLeft: state.payerActionsLeft.length,
    settledAfterMs,
    providerReconcileOk: report.ok,
    providerReconcileFailed: reconcileFailed.map((check) => check.name),
    faultsArmed: p.armed.length,
    faultsStruck: tally(struck),
    webhookDeliveries: tally(simulator.webhooks.deliveries.map((delivery) => String(delivery.status))),
    payerAnswers: p.storm.payerAnswers,
    cancelledByReason: tally(cardRecords.filter((record) => record.manual !== 'cancel').flatMap((record) => [...record.cancelReasons])),
    manual: {
      reserved: reserved.length,
      captured: reserved.filter((record) => record.settled === 'succeeded').length,
      cancelled: reserved.filter((record) => record.settled === 'cancelled').length,
      refused: refused.length,
      unanswered: unanswered.length,
    },
    settleAnswers: p.storm.settleAnswers,
    authenticatedThenCancelled: authenticatedThenCancelled.length,
    authenticatedThenCancelledCharges: authenticatedThenCancelled,
    problems,
  };
}

/**
 * 3-D Secure keys whose payer authenticated successfully and that ended cancelled without the
 * caller asking. A manual charge the storm cancelled once reserved is not one of them: its payer's
 * payment was cancelled because the caller asked, and a create copy still in flight then answers
 * with what the cancel did (cancelled), as createOutcomes says.
 */
export function authenticatedThenCancelledUnasked(records: Iterable<KeyRecord>): KeyRecord[] {
  return [...records].filter((record) => record.payerActed === 'succeed' && record.manual !== 'cancel' && record.outcomes.has('cancelled'));
}

/** What the ledger, the simulator and its deliveries have of one authenticated, cancelled charge. */
function describeAuthenticatedThenCancelled(simulator: StripeSimulator, charge: LedgerCharge['charge'] | undefined, record: KeyRecord): AuthenticatedThenCancelled {
  const createdMs = charge === undefined ? record.firstSentAtMs : Date.parse(charge.createdAt);
  const after = (atMs: number): string => `${atMs >= createdMs ? '+' : ''}${((atMs - createdMs) / 1000).toFixed(1)} s`;
  const paymentId = charge?.provider?.paymentId ?? record.paymentId;
  const eventsOfPayment = new Map(
    simulator.webhooks.events
      .filter((event) => paymentId !== null && (JSON.parse(event.payload) as { data: { object: { id?: string } } }).data.object.id === paymentId)
      .map((event) => [event.id, event.type]),
  );
  return {
    key: record.key,
    manual: record.manual,
    failureReason: charge?.failureReason ?? null,
    paymentStatus: paymentId === null ? null : (simulator.payments.paymentIntents.get(paymentId)?.status ?? null),
    payerActedAfterMs: record.payerActedAtMs === null ? null : record.payerActedAtMs - createdMs,
    lastChangeAfterMs: charge === undefined ? null : Date.parse(charge.updatedAt) - createdMs,
    deliveries: simulator.webhooks.deliveries
      .filter((delivery) => eventsOfPayment.has(delivery.eventId))
      .map((delivery) => `${delivery.type} ${delivery.status} ${after(delivery.atMs)}`),
    requests: simulator.requests
      .filter((request) => paymentId !== null && request.path.includes(paymentId))
      .map((request) => `${request.operation} ${request.status}${request.fault === null ? '' : ` (${request.fault})`} ${after(request.atMs)}`),
  };
}
