/**
 * The paths through the workflow code that get a recorded history, one entry each. The recorder
 * (scripts/record-workflow-histories.ts) runs every entry against a real Temporal server and
 * PostgreSQL; the replay test checks that the newest recording has one history per entry.
 *
 * A new branch in workflow code gets a new entry here: drive the services until the workflow has
 * taken that branch, check that it did (a recording of the wrong branch proves nothing), and
 * return the execution whose history to keep.
 */
import { randomUUID } from 'node:crypto';
import { WorkflowFailedError, WorkflowUpdateStage, type Client } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { LedgerStep } from '../activities/index.js';
import { RefundRefusedError, type ChargeService } from '../src/service/charge-service.js';
import { chargeWorkflowId, type Charge, type ChargeIntent } from '../src/domain/charge.js';
import { refundWorkflowId, type Refund } from '../src/domain/refund.js';
import { cancelReasons } from '../src/domain/refusals.js';
import { chargeFingerprint } from '../src/domain/request-fingerprint.js';
import { readCharge, tryHold } from '../src/ledger/charges.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import {
  cancelChargeUpdate,
  captureChargeUpdate,
  chargeWorkflowType,
  providerEventSignal,
  holdSweeperWorkflowType,
  refundWorkflowType,
  releaseHoldWorkflowId,
  releaseHoldWorkflowType,
  type ChargePolicy,
  type ChargeWorkflowInput,
  type HoldSweepInput,
  type HoldSweepResult,
  type ReleaseHoldInput,
  type RefundWorkflowInput,
} from '../workflows/definitions.js';
import type { OrderAgentInput, OrderAgentResult } from '../workflows/sample-agent-workflow.js';
import { activityTypesOf } from './workflow-histories.js';
import { chargeIdFor } from '../src/domain/request-fingerprint.js';
import type { PaymentIntentRecord } from '../src/providers/stripe/simulator/payments.js';
import { clearingAccountId } from '../src/domain/providers.js';
import type { StripeSimulator } from '../src/providers/stripe/simulator/server.js';

export interface WorkflowRef {
  workflowId: string;
  /** When the history to keep is not the latest run of the id (a reset). */
  runId?: string;
}

export interface RecordingContext {
  /** A tenant of this recording alone, with accounts `payer` (funded) and `payee`. */
  tenant: string;
  /** Served only by the recorder's worker, so no other code can take part in a recording. */
  taskQueue: string;
  temporal: Client;
  ledger: LedgerPool;
  policy: ChargePolicy;
  /** A client on the recorder's task queue (or `taskQueue`), with the recorder's policy overridden by `policy`. */
  client(policy?: Partial<ChargePolicy>, taskQueue?: string): ChargeService;
  /**
   * A first workflow task that waited in its queue: `start` starts workflows on a task queue no
   * worker polls yet; past the workflow task heartbeat deadline (80% of the 10 s workflow task
   * timeout) a worker starts serving it, until `finish` resolves. As after a fleet restart under load.
   */
  withLateWorker<T>(start: (taskQueue: string) => Promise<T>, finish: (started: T) => Promise<WorkflowRef>): Promise<WorkflowRef>;
  body(amountMinor: number, capture?: 'automatic' | 'manual'): Record<string, unknown>;
  /** Runs `hook` before every attempt of this step for this key (throw to make the step fail). */
  onStep(step: LedgerStep, key: string, hook: () => void | Promise<void>): void;
  /** Runs `hook` after this step committed for this key, before it reports (throw: the answer is lost). */
  onCommit(step: LedgerStep, key: string, hook: () => void | Promise<void>): void;
  /**
   * A tenant of this path alone, with accounts `payer` (funded) and `payee`: for paths that look at
   * every hold of a tenant (a sweep), which the other paths, running side by side, must not touch.
   */
  ownTenant(label: string): Promise<string>;
  /** The provider the recorder's worker charges (the stateful Stripe simulator). */
  sim: StripeSimulator;
}

export interface HistoryPath {
  /** The history's file name (without .history.pb), and the idempotency key the path uses. */
  name: string;
  about: string;
  record(ctx: RecordingContext, key: string): Promise<WorkflowRef>;
}

/** Throws unless the charge ended the way the path is meant to end it. */
function expectCharge(charge: Charge, expected: Partial<Pick<Charge, 'status' | 'failureReason' | 'amountCapturedMinor'>>): void {
  for (const [field, value] of Object.entries(expected)) {
    const actual = charge[field as keyof Charge];
    if (actual !== value) {
      throw new Error(`expected ${field} ${JSON.stringify(value)}, the charge has ${JSON.stringify(actual)}: the workflow took another branch`);
    }
  }
}

function chargeRef(ctx: RecordingContext, key: string): WorkflowRef {
  return { workflowId: chargeWorkflowId(ctx.tenant, key) };
}

/** The activities (local or remote) the execution ran, in order. */
async function activitiesRun(ctx: RecordingContext, ref: WorkflowRef): Promise<string[]> {
  const history = await ctx.temporal.workflow.getHandle(ref.workflowId, ref.runId, { followRuns: false }).fetchHistory();
  return activityTypesOf(history);
}

/** Waits until a remote activity of this type has completed in the execution (its answer is in the history). */
async function untilActivityCompleted(ctx: RecordingContext, ref: WorkflowRef, activityType: string): Promise<void> {
  const handle = ctx.temporal.workflow.getHandle(ref.workflowId, ref.runId, { followRuns: false });
  const deadlineMs = Date.now() + 30_000;
  for (;;) {
    const events = (await handle.fetchHistory()).events ?? [];
    const scheduled = new Set(events.filter((event) => event.activityTaskScheduledEventAttributes?.activityType?.name === activityType).map((event) => String(event.eventId)));
    if (events.some((event) => scheduled.has(String(event.activityTaskCompletedEventAttributes?.scheduledEventId ?? '')))) return;
    if (Date.now() > deadlineMs) throw new Error(`${ref.workflowId}: no ${activityType} completed within 30 s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Throws unless the execution ran exactly these activities, in this order: the branch it took. */
async function expectActivities(ctx: RecordingContext, ref: WorkflowRef, expected: string[]): Promise<WorkflowRef> {
  const ran = await activitiesRun(ctx, ref);
  if (JSON.stringify(ran) !== JSON.stringify(expected)) {
    throw new Error(`expected the activities ${JSON.stringify(expected)}, ${ref.workflowId} ran ${JSON.stringify(ran)}: it took another branch`);
  }
  return ref;
}

/** Throws unless the charge row is in this state with this failure reason (null: no row at all). */
async function expectRow(ctx: RecordingContext, key: string, expected: { holdState: string; failureReason: string | null } | null) {
  const row = await readCharge(ctx.ledger, ctx.tenant, key);
  const actual = row ? { holdState: row.holdState, failureReason: row.charge.failureReason } : null;
  if (JSON.stringify(actual) !== JSON.stringify(expected)) {
    throw new Error(`expected the ledger row ${JSON.stringify(expected)} for ${key}, it has ${JSON.stringify(actual)}`);
  }
}

/** The failure types along a workflow failure's cause chain (outermost first). */
function failureTypes(error: unknown): string[] {
  const types: string[] = [];
  for (let cause = error; cause instanceof Error; cause = cause.cause) {
    types.push(cause instanceof ApplicationFailure && cause.type ? cause.type : cause.name);
  }
  return types;
}

/** Throws unless the execution failed with this type somewhere in its failure's causes. */
async function expectWorkflowFailure(result: Promise<unknown>, type: string): Promise<void> {
  const error = await result.then(
    () => null,
    (e: unknown) => e,
  );
  if (!(error instanceof WorkflowFailedError)) throw new Error(`expected the workflow to fail, got ${String(error)}`);
  if (!failureTypes(error).includes(type)) {
    throw new Error(`expected the workflow to fail with ${type}, it failed with ${JSON.stringify(failureTypes(error))}`);
  }
}

/** A PostgreSQL error as node-postgres reports it: the activities classify it by its SQLSTATE. */
function sqlError(code: string, message: string): Error {
  return Object.assign(new Error(`${message} (injected by the history recorder)`), { code });
}

/** Starts ChargeWorkflow under the key's usual id with an intent the client would not have built. */
async function startFromIntent(ctx: RecordingContext, intent: ChargeIntent) {
  return ctx.temporal.workflow.start<(input: ChargeWorkflowInput) => Promise<Charge>>(chargeWorkflowType, {
    taskQueue: ctx.taskQueue,
    workflowId: chargeWorkflowId(intent.tenant, intent.idempotencyKey),
    args: [{ intent, policy: ctx.policy }],
    memo: { fingerprint: intent.fingerprint },
    workflowIdReusePolicy: 'REJECT_DUPLICATE',
  });
}

/** A manual-capture hold whose workflow an operator terminated: TRIED, and nothing will settle it. */
async function orphanedHold(ctx: RecordingContext, tenant: string, key: string, amountMinor: number): Promise<void> {
  const reply = await ctx.client().charge(tenant, key, ctx.body(amountMinor, 'manual'));
  expectCharge(reply.charge, { status: 'reserved' });
  await ctx.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).terminate('history recorder: an operator stopped it');
  const row = await readCharge(ctx.ledger, tenant, key);
  if (row?.holdState !== 'TRIED') throw new Error(`expected ${key} to stay held once its workflow was terminated, it is ${row?.holdState}`);
}

/** A hold already past its expiry with no workflow at all: as a lost worker fleet leaves it. */
async function expiredHold(ctx: RecordingContext, tenant: string, key: string, amountMinor: number): Promise<void> {
  await tryHold(ctx.ledger, ctx.client().buildIntent(tenant, key, ctx.body(amountMinor, 'manual')), -60_000);
}

/** A sweep of one tenant that judges every stranded hold at once. */
async function sweep(ctx: RecordingContext, tenant: string, key: string, releaseBatchSize: number, taskQueue = ctx.taskQueue) {
  const input: HoldSweepInput = {
    releaseBatchSize,
    expiredGraceMs: 0,
    orphanMinAgeMs: 0,
    orphanExaminedMax: 100,
    activityStartToCloseMs: ctx.policy.activityStartToCloseMs,
    tenant,
  };
  const workflowId = `sweep/${ctx.tenant}/${key}`;
  const result = await ctx.temporal.workflow.execute<(input: HoldSweepInput) => Promise<HoldSweepResult>>(holdSweeperWorkflowType, {
    taskQueue,
    workflowId,
    args: [input],
  });
  return { result, ref: { workflowId } };
}

function expectSweep(result: HoldSweepResult, expected: HoldSweepResult): void {
  if (JSON.stringify(result) !== JSON.stringify(expected)) {
    throw new Error(`expected the sweep ${JSON.stringify(expected)}, it answered ${JSON.stringify(result)}: it took another branch`);
  }
}

async function releaseHoldOf(ctx: RecordingContext, key: string, taskQueue = ctx.taskQueue) {
  const input: ReleaseHoldInput = {
    tenant: ctx.tenant,
    idempotencyKey: key,
    reason: cancelReasons.requestedByCaller,
    activityStartToCloseMs: ctx.policy.activityStartToCloseMs,
  };
  const workflowId = releaseHoldWorkflowId(ctx.tenant, key);
  const charge = await ctx.temporal.workflow.execute<(input: ReleaseHoldInput) => Promise<Charge | null>>(releaseHoldWorkflowType, {
    taskQueue,
    workflowId,
    args: [input],
  });
  return { charge, ref: { workflowId } };
}

/** Try or Confirm failing on a system fault (the database starting up) for longer than its short budget. */
async function budgetExhausted(ctx: RecordingContext, key: string, step: 'try' | 'confirm'): Promise<WorkflowRef> {
  let attempts = 0;
  ctx.onStep(step, key, () => {
    attempts++;
    throw sqlError('57P03', 'the database system is starting up');
  });
  const policy: Partial<ChargePolicy> = step === 'try' ? { tryBudgetMs: 3_000 } : { confirmBudgetMs: 3_000 };
  const { charge } = await ctx.client(policy).charge(ctx.tenant, key, ctx.body(1_100));
  const reason = step === 'try' ? cancelReasons.tryBudgetExhausted : cancelReasons.confirmBudgetExhausted;
  expectCharge(charge, { status: 'cancelled', failureReason: reason });
  if (attempts < 2) throw new Error(`expected ${step} to be retried while its budget lasted, it ran ${attempts} time(s)`);
  await expectRow(ctx, key, { holdState: 'CANCELLED', failureReason: reason });
  const steps = step === 'try' ? ['tryCharge', 'cancelCharge'] : ['tryCharge', 'confirmCharge', 'cancelCharge'];
  return expectActivities(ctx, chargeRef(ctx, key), steps);
}

/** A second execution for a key the ledger already knows: what happens once Temporal forgot the key (after retention). */
async function startAnotherExecution(ctx: RecordingContext, key: string, body: Record<string, unknown>) {
  const input: ChargeWorkflowInput = { intent: ctx.client().buildIntent(ctx.tenant, key, body), policy: ctx.policy };
  return ctx.temporal.workflow.start<(input: ChargeWorkflowInput) => Promise<Charge>>(chargeWorkflowType, {
    taskQueue: ctx.taskQueue,
    // The key's own id (the workflow refuses any other), reused as Temporal allows once the
    // first execution closed: what a start after retention looks like to the workflow.
    workflowId: chargeWorkflowId(ctx.tenant, key),
    workflowIdReusePolicy: 'ALLOW_DUPLICATE',
    args: [input],
  });
}

/** Starts a provider charge on the recorder's queue (the workflow input the service builds for `payment_method`). */
async function startProviderCharge(
  ctx: RecordingContext,
  key: string,
  paymentMethod: string,
  options: { amountMinor?: number; captureMode?: 'automatic' | 'manual'; policy?: Partial<ChargePolicy>; returnUrl?: string } = {},
) {
  const request = {
    orderId: `order-${key}`,
    payerAccountId: clearingAccountId('stripe', 'USD'),
    payeeAccountId: 'payee',
    amountMinor: options.amountMinor ?? 1_000,
    currency: 'USD',
    captureMode: options.captureMode ?? 'automatic',
    description: null,
    metadata: null,
    paymentMethod: { provider: 'stripe' as const, id: paymentMethod },
    ...(options.returnUrl !== undefined ? { returnUrl: options.returnUrl } : {}),
  };
  const intent: ChargeIntent = {
    tenant: ctx.tenant,
    idempotencyKey: key,
    chargeId: chargeIdFor(ctx.tenant, key),
    fingerprint: chargeFingerprint(request),
    request,
  };
  const input: ChargeWorkflowInput = { intent, policy: { ...ctx.policy, providerStepStartToCloseMs: 10_000, ...options.policy } };
  return ctx.temporal.workflow.start<(input: ChargeWorkflowInput) => Promise<Charge>>(chargeWorkflowType, {
    taskQueue: ctx.taskQueue,
    workflowId: chargeWorkflowId(ctx.tenant, key),
    args: [input],
  });
}

/** Waits (bounded) until the charge's status query says `done`. */
async function untilStatus(ctx: RecordingContext, key: string, done: (charge: Charge) => boolean): Promise<Charge> {
  const handle = ctx.temporal.workflow.getHandle(chargeWorkflowId(ctx.tenant, key));
  const deadlineMs = Date.now() + 30_000;
  for (;;) {
    const charge = await handle.query<Charge>('status');
    if (done(charge)) return charge;
    if (Date.now() > deadlineMs) throw new Error(`charge ${key} did not reach the expected state; it is ${charge.status}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The simulator's PaymentIntent for a charge, once it is as `done` wants it. */
async function untilPayment(ctx: RecordingContext, chargeId: string, done: (payment: PaymentIntentRecord) => boolean): Promise<PaymentIntentRecord> {
  const deadlineMs = Date.now() + 30_000;
  for (;;) {
    const payment = [...ctx.sim.payments.paymentIntents.values()].find((candidate) => candidate.metadata['charge_id'] === chargeId);
    if (payment && done(payment)) return payment;
    if (Date.now() > deadlineMs) throw new Error(`no payment for charge ${chargeId} as expected; it is ${payment?.status ?? 'absent'}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function injectedRefusal(what: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(`injected by the history recorder: ${what}`, 'InjectedFault');
}

async function startAgent(ctx: RecordingContext, key: string, taskQueue = ctx.taskQueue) {
  const handle = await startAgentOn(ctx, key, taskQueue);
  return { handle, result: await agentResult(handle) };
}

async function startAgentOn(ctx: RecordingContext, key: string, taskQueue: string) {
  const input: OrderAgentInput = {
    intents: [ctx.client().buildIntent(ctx.tenant, key, ctx.body(1_200))],
    policy: ctx.policy,
    chargeTaskQueue: taskQueue,
  };
  return ctx.temporal.workflow.start<(input: OrderAgentInput) => Promise<OrderAgentResult>>('OrderAgentWorkflow', {
    taskQueue,
    workflowId: `agent/${ctx.tenant}/${key}`,
    args: [input],
  });
}

async function agentResult(handle: Awaited<ReturnType<typeof startAgentOn>>): Promise<OrderAgentResult> {
  const result = await handle.result();
  if (result.charges.length !== 1) throw new Error(`the agent reported ${result.charges.length} charges, not 1`);
  expectCharge(result.charges[0]!, { status: 'succeeded' });
  return result;
}

export const historyPaths: HistoryPath[] = [
  {
    name: 'charge-automatic-succeeded',
    about: 'automatic capture: Try reserves, Confirm captures',
    async record(ctx, key) {
      expectCharge((await ctx.client().charge(ctx.tenant, key, ctx.body(1_000))).charge, { status: 'succeeded' });
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'charge-declined',
    about: 'Try declines (insufficient funds): nothing held, nothing to compensate',
    async record(ctx, key) {
      expectCharge((await ctx.client().charge(ctx.tenant, key, ctx.body(900_000_000))).charge, { status: 'declined' });
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'charge-try-failed-compensated',
    about: 'Try fails non-retryably (not a ledger decision): Cancel compensates',
    async record(ctx, key) {
      ctx.onStep('try', key, () => {
        throw injectedRefusal('Try refused');
      });
      const { charge } = await ctx.client().charge(ctx.tenant, key, ctx.body(1_000));
      expectCharge(charge, { status: 'cancelled', failureReason: cancelReasons.ledgerUnavailable });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'cancelCharge']);
    },
  },
  {
    name: 'charge-confirm-failed-compensated',
    about: 'Confirm fails non-retryably: Cancel releases the hold',
    async record(ctx, key) {
      ctx.onStep('confirm', key, () => {
        throw injectedRefusal('capture refused');
      });
      const { charge } = await ctx.client().charge(ctx.tenant, key, ctx.body(5_000));
      expectCharge(charge, { status: 'cancelled', failureReason: 'confirm_failed' });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'confirmCharge', 'cancelCharge']);
    },
  },
  {
    name: 'charge-automatic-cancel-requested-while-reserving',
    about: 'automatic capture: a cancel update arrives while Try runs, so the reserved hold is released instead of captured',
    async record(ctx, key) {
      let release = (): void => undefined;
      const released = new Promise<void>((resolve) => (release = resolve));
      // Try waits until the cancel is accepted. A local activity holds its workflow task open, so
      // the update reaches the workflow with the task's heartbeat (80% of the task timeout).
      ctx.onStep('try', key, () => released);
      const patient = ctx.client({ activityStartToCloseMs: 60_000, tryBudgetMs: 120_000 });
      const { handle } = await patient.startCharge(ctx.tenant, key, ctx.body(1_000));
      try {
        const update = await handle.startUpdate(cancelChargeUpdate, { waitForStage: WorkflowUpdateStage.ACCEPTED });
        release();
        expectCharge(await update.result(), { status: 'cancelled', failureReason: 'requested_by_caller' });
      } finally {
        release();
      }
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'charge-manual-captured-full',
    about: 'manual capture: the hold waits, a capture without amount captures all of it',
    async record(ctx, key) {
      const client = ctx.client();
      expectCharge((await client.charge(ctx.tenant, key, ctx.body(2_000, 'manual'))).charge, { status: 'reserved' });
      expectCharge(await client.captureCharge(ctx.tenant, key), { status: 'succeeded', amountCapturedMinor: 2_000 });
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'charge-manual-captured-partially',
    about: 'manual capture of less than authorised: the rest is released',
    async record(ctx, key) {
      const client = ctx.client();
      expectCharge((await client.charge(ctx.tenant, key, ctx.body(2_000, 'manual'))).charge, { status: 'reserved' });
      expectCharge(await client.captureCharge(ctx.tenant, key, 1_500), { status: 'succeeded', amountCapturedMinor: 1_500 });
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'charge-manual-cancelled',
    about: 'manual capture: a cancel update releases the hold',
    async record(ctx, key) {
      const client = ctx.client();
      expectCharge((await client.charge(ctx.tenant, key, ctx.body(3_000, 'manual'))).charge, { status: 'reserved' });
      expectCharge(await client.cancelCharge(ctx.tenant, key), { status: 'cancelled', failureReason: 'requested_by_caller' });
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'charge-manual-hold-expired',
    about: 'manual capture: nobody captures, the hold timer fires and the hold is voided',
    async record(ctx, key) {
      const { handle } = await ctx.client({ holdTtlMs: 500 }).startCharge(ctx.tenant, key, ctx.body(4_000, 'manual'));
      expectCharge(await handle.result(), { status: 'cancelled', failureReason: 'hold_expired' });
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'charge-manual-workflow-cancelled',
    about: 'manual capture: the workflow itself is cancelled (Web UI, temporal workflow cancel) and still releases the hold',
    async record(ctx, key) {
      const client = ctx.client();
      expectCharge((await client.charge(ctx.tenant, key, ctx.body(2_500, 'manual'))).charge, { status: 'reserved' });
      const handle = ctx.temporal.workflow.getHandle<(input: ChargeWorkflowInput) => Promise<Charge>>(chargeWorkflowId(ctx.tenant, key));
      await handle.cancel();
      expectCharge(await handle.result(), { status: 'cancelled', failureReason: 'requested_by_caller' });
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'charge-try-refused-idempotency-conflict',
    about: 'a new execution for a key the ledger holds for another request: Try refuses it (IdempotencyConflict) and the workflow fails with that refusal, nothing compensated',
    async record(ctx, key) {
      expectCharge((await ctx.client().charge(ctx.tenant, key, ctx.body(1_000))).charge, { status: 'succeeded' });
      const handle = await startAnotherExecution(ctx, key, ctx.body(1_001));
      // The local step's refusal is recognised as one: the workflow fails with it, and no Cancel
      // runs under a key that belongs to another request.
      await expectWorkflowFailure(handle.result(), 'IdempotencyConflict');
      return expectActivities(ctx, { workflowId: handle.workflowId }, ['tryCharge']);
    },
  },
  {
    name: 'charge-try-after-cancel',
    about: 'a new execution for a key whose charge was cancelled: Try refuses to reserve (HoldCancelled), the workflow reads the row, the charge stays cancelled',
    async record(ctx, key) {
      const client = ctx.client();
      const body = ctx.body(1_000, 'manual');
      expectCharge((await client.charge(ctx.tenant, key, body)).charge, { status: 'reserved' });
      expectCharge(await client.cancelCharge(ctx.tenant, key), { status: 'cancelled' });
      const handle = await startAnotherExecution(ctx, key, body);
      expectCharge(await handle.result(), { status: 'cancelled', failureReason: 'requested_by_caller' });
      // The refusal is recognised: the row is read, not compensated as if the ledger were down.
      return expectActivities(ctx, { workflowId: handle.workflowId }, ['tryCharge', 'readCharge']);
    },
  },
  {
    name: 'charge-try-budget-exhausted',
    about: 'Try fails on a system fault (SQLSTATE 57P03) for longer than its budget: given up, Cancel writes the tombstone (try_budget_exhausted)',
    record: (ctx, key) => budgetExhausted(ctx, key, 'try'),
  },
  {
    name: 'charge-confirm-budget-exhausted',
    about: 'Confirm fails on a system fault (SQLSTATE 57P03) for longer than its budget: given up, Cancel releases the hold (confirm_budget_exhausted)',
    record: (ctx, key) => budgetExhausted(ctx, key, 'confirm'),
  },
  {
    name: 'charge-try-hung-budget-exhausted',
    about: 'every Try attempt hangs past its start-to-close timeout: given up at its budget, Cancel writes the tombstone (try_budget_exhausted)',
    async record(ctx, key) {
      let release = (): void => undefined;
      const released = new Promise<void>((resolve) => (release = resolve));
      let attempts = 0;
      ctx.onStep('try', key, async () => {
        attempts++;
        await released; // a connection that never answers
        throw new Error('a hung Try attempt released after the recording (injected by the history recorder)');
      });
      try {
        const { charge } = await ctx
          .client({ activityStartToCloseMs: 1_000, tryBudgetMs: 3_000 })
          .charge(ctx.tenant, key, ctx.body(1_200));
        expectCharge(charge, { status: 'cancelled', failureReason: cancelReasons.tryBudgetExhausted });
      } finally {
        release();
      }
      if (attempts < 2) throw new Error(`expected the hung Try to be attempted again, it ran ${attempts} time(s)`);
      await expectRow(ctx, key, { holdState: 'CANCELLED', failureReason: cancelReasons.tryBudgetExhausted });
      const ran = await activitiesRun(ctx, chargeRef(ctx, key));
      if (ran[0] !== 'tryCharge' || ran.at(-1) !== 'cancelCharge' || ran.includes('confirmCharge')) {
        throw new Error(`expected Try given up and then Cancel, the history ran ${JSON.stringify(ran)}`);
      }
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'charge-try-answers-lost-past-deadline',
    about: "Try commits but every answer is lost (a retryable fault after the commit) past its budget: the step gives itself up at the deadline the workflow passed it, Cancel releases the hold (try_budget_exhausted); no timer enters the history",
    async record(ctx, key) {
      let lost = 0;
      ctx.onCommit('try', key, () => {
        lost++;
        throw new Error('connection lost after Try committed (injected by the history recorder)');
      });
      const { charge } = await ctx.client({ tryBudgetMs: 3_000 }).charge(ctx.tenant, key, ctx.body(1_400));
      expectCharge(charge, { status: 'cancelled', failureReason: cancelReasons.tryBudgetExhausted });
      if (lost < 2) throw new Error(`expected Try to be retried while its budget lasted, it ran ${lost} time(s)`);
      await expectRow(ctx, key, { holdState: 'CANCELLED', failureReason: cancelReasons.tryBudgetExhausted });
      const history = await ctx.temporal.workflow.getHandle(chargeWorkflowId(ctx.tenant, key)).fetchHistory();
      if (history.events?.some((event) => event.timerStartedEventAttributes)) {
        throw new Error('expected no timer in the history: the budget is a deadline the step enforces');
      }
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'cancelCharge']);
    },
  },
  {
    name: 'charge-try-data-rejected-tombstone',
    about: 'Try fails on a value the ledger rejects (SQLSTATE 22003): decided at once, Cancel writes the tombstone (ledger_rejected_data)',
    async record(ctx, key) {
      let attempts = 0;
      ctx.onStep('try', key, () => {
        attempts++;
        throw sqlError('22003', 'value out of range for type bigint');
      });
      const { charge } = await ctx.client().charge(ctx.tenant, key, ctx.body(700));
      expectCharge(charge, { status: 'cancelled', failureReason: cancelReasons.ledgerRejectedData });
      if (attempts !== 1) throw new Error(`expected one Try attempt (a data error is not retried), it ran ${attempts}`);
      await expectRow(ctx, key, { holdState: 'CANCELLED', failureReason: cancelReasons.ledgerRejectedData });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'cancelCharge']);
    },
  },
  {
    name: 'charge-try-data-rejected-no-row',
    about: 'a NUL in order_id reaches the ledger: Try and Cancel are both rejected (22021), the read finds no row, the charge ends cancelled with nothing recorded',
    async record(ctx, key) {
      const valid = ctx.client().buildIntent(ctx.tenant, key, ctx.body(1_200));
      // Fingerprinted as the service fingerprints what it validated: the workflow refuses a start
      // whose fingerprint does not match its request (ForgedStart).
      const poisonedRequest = { ...valid.request, orderId: 'order-\u0000-1' };
      const poisoned: ChargeIntent = { ...valid, request: poisonedRequest, fingerprint: chargeFingerprint(poisonedRequest) };
      const handle = await startFromIntent(ctx, poisoned);
      expectCharge(await handle.result(), { status: 'cancelled', failureReason: cancelReasons.ledgerRejectedData });
      await expectRow(ctx, key, null);
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'cancelCharge', 'readCharge']);
    },
  },
  {
    name: 'charge-confirm-data-rejected-cancel-retried',
    about: 'Confirm fails on a rejected value (22003); Cancel is refused as a statement (42883) three times and retried until it releases the hold',
    async record(ctx, key) {
      ctx.onStep('confirm', key, () => {
        throw sqlError('22003', 'numeric field overflow');
      });
      let cancelAttempts = 0;
      ctx.onStep('cancel', key, () => {
        if (++cancelAttempts <= 3) throw sqlError('42883', 'function ledger_cancel does not exist');
      });
      const { charge } = await ctx.client().charge(ctx.tenant, key, ctx.body(900));
      expectCharge(charge, { status: 'cancelled', failureReason: cancelReasons.ledgerRejectedData });
      if (cancelAttempts !== 4) throw new Error(`expected Cancel to succeed on its 4th attempt, it ran ${cancelAttempts} time(s)`);
      await expectRow(ctx, key, { holdState: 'CANCELLED', failureReason: cancelReasons.ledgerRejectedData });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'confirmCharge', 'cancelCharge']);
    },
  },
  {
    name: 'charge-try-statement-rejected',
    about: 'Try is refused as a statement (SQLSTATE 42883, only an operator can cure it): decided at once, Cancel writes the tombstone (ledger_rejected_statement)',
    async record(ctx, key) {
      let attempts = 0;
      ctx.onStep('try', key, () => {
        attempts++;
        throw sqlError('42883', 'function ledger_try does not exist');
      });
      const { charge } = await ctx.client().charge(ctx.tenant, key, ctx.body(800));
      expectCharge(charge, { status: 'cancelled', failureReason: cancelReasons.ledgerRejectedStatement });
      if (attempts !== 1) throw new Error(`expected one Try attempt (a rejected statement is not retried), it ran ${attempts}`);
      await expectRow(ctx, key, { holdState: 'CANCELLED', failureReason: cancelReasons.ledgerRejectedStatement });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'cancelCharge']);
    },
  },
  {
    name: 'charge-compensation-finds-confirm-committed',
    about: "Confirm commits but its answer is lost (non-retryably): Cancel is refused (HoldAlreadyCaptured), the row is read, the charge succeeded",
    async record(ctx, key) {
      let lost = 0;
      ctx.onCommit('confirm', key, () => {
        lost++;
        throw injectedRefusal('the answer of a committed Confirm is lost');
      });
      const { charge } = await ctx.client().charge(ctx.tenant, key, ctx.body(1_300));
      expectCharge(charge, { status: 'succeeded', amountCapturedMinor: 1_300 });
      if (lost !== 1) throw new Error(`expected one committed Confirm whose answer was lost, got ${lost}`);
      await expectRow(ctx, key, { holdState: 'CONFIRMED', failureReason: null });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'confirmCharge', 'cancelCharge', 'readCharge']);
    },
  },
  {
    name: 'hold-sweep-expired-and-orphaned',
    about: 'HoldSweeperWorkflow: one sweep voids an expired hold (hold_expired) and an orphaned one (hold_orphaned), within its batch',
    async record(ctx, key) {
      const tenant = await ctx.ownTenant(key);
      await expiredHold(ctx, tenant, `${key}-expired`, 400);
      await orphanedHold(ctx, tenant, `${key}-orphaned`, 500);
      const { result, ref } = await sweep(ctx, tenant, key, 10);
      expectSweep(result, { expiredReleased: 1, orphanedReleased: 1, orphanCandidatesExamined: 1, batchFull: false });
      for (const [hold, reason] of [
        [`${key}-expired`, cancelReasons.holdExpired],
        [`${key}-orphaned`, cancelReasons.holdOrphaned],
      ] as const) {
        const row = await readCharge(ctx.ledger, tenant, hold);
        if (row?.holdState !== 'CANCELLED' || row.charge.failureReason !== reason) {
          throw new Error(`expected ${hold} voided (${reason}), it is ${row?.holdState} (${row?.charge.failureReason})`);
        }
      }
      return expectActivities(ctx, ref, ['findExpiredHolds', 'releaseHold', 'findOrphanedHolds', 'releaseHold']);
    },
  },
  {
    name: 'hold-sweep-batch-full',
    about: 'HoldSweeperWorkflow: expired holds fill the batch, so the sweep stops before looking for orphans (batchFull)',
    async record(ctx, key) {
      const tenant = await ctx.ownTenant(key);
      await expiredHold(ctx, tenant, `${key}-1`, 300);
      await expiredHold(ctx, tenant, `${key}-2`, 300);
      const { result, ref } = await sweep(ctx, tenant, key, 1);
      expectSweep(result, { expiredReleased: 1, orphanedReleased: 0, orphanCandidatesExamined: 0, batchFull: true });
      return expectActivities(ctx, ref, ['findExpiredHolds', 'releaseHold']);
    },
  },
  {
    name: 'release-hold-orphaned',
    about: "ReleaseHoldWorkflow: a caller's cancel of a hold whose workflow was terminated releases it",
    async record(ctx, key) {
      await orphanedHold(ctx, ctx.tenant, key, 600);
      const { charge, ref } = await releaseHoldOf(ctx, key);
      if (!charge) throw new Error('expected the released charge, the release answered null');
      expectCharge(charge, { status: 'cancelled', failureReason: cancelReasons.requestedByCaller });
      await expectRow(ctx, key, { holdState: 'CANCELLED', failureReason: cancelReasons.requestedByCaller });
      return expectActivities(ctx, ref, ['releaseHold']);
    },
  },
  {
    name: 'release-hold-no-row',
    about: 'ReleaseHoldWorkflow: a key the ledger never saw answers null and records nothing',
    async record(ctx, key) {
      const { charge, ref } = await releaseHoldOf(ctx, key);
      if (charge !== null) throw new Error(`expected null for a key the ledger never saw, got ${JSON.stringify(charge)}`);
      await expectRow(ctx, key, null);
      return expectActivities(ctx, ref, ['releaseHold']);
    },
  },
  {
    name: 'refund-succeeded',
    about: 'a partial refund of a captured charge',
    async record(ctx, key) {
      const client = ctx.client();
      expectCharge((await client.charge(ctx.tenant, key, ctx.body(1_000))).charge, { status: 'succeeded' });
      const { refund } = await client.refund(ctx.tenant, key, 'refund-1', { amount: 400 });
      if (refund.status !== 'succeeded') throw new Error(`expected the refund to succeed, it is ${refund.status}`);
      return { workflowId: refundWorkflowId(ctx.tenant, key, 'refund-1') };
    },
  },
  {
    name: 'refund-refused',
    about: 'a refund of more than is left to refund: the ledger refuses it, the workflow fails with that decision',
    async record(ctx, key) {
      const client = ctx.client();
      expectCharge((await client.charge(ctx.tenant, key, ctx.body(1_000))).charge, { status: 'succeeded' });
      await client.refund(ctx.tenant, key, 'refund-1', { amount: 800 });
      const refused = await client.refund(ctx.tenant, key, 'refund-2', { amount: 300 }).then(
        () => null,
        (e: unknown) => e,
      );
      if (!(refused instanceof RefundRefusedError)) throw new Error(`expected the refund to be refused, got ${String(refused)}`);
      return { workflowId: refundWorkflowId(ctx.tenant, key, 'refund-2') };
    },
  },
  {
    name: 'refund-data-rejected',
    about: 'a refund whose values the ledger rejects (a NUL in the refund key): the workflow fails at once with LedgerDataRejected',
    async record(ctx, key) {
      const client = ctx.client();
      const { charge } = await client.charge(ctx.tenant, key, ctx.body(1_000));
      expectCharge(charge, { status: 'succeeded' });
      const valid = client.buildRefundIntent(ctx.tenant, key, 'refund-1', { amount: 400 });
      const intent = { ...valid, refundKey: `${valid.refundKey}\u0000` };
      const pending: Refund = {
        id: intent.refundId,
        tenant: ctx.tenant,
        chargeKey: key,
        chargeId: charge.id,
        refundKey: intent.refundKey,
        amountMinor: 400,
        requestedAmountMinor: 400,
        currency: 'USD',
        status: 'pending',
        failureCode: null,
        createdAt: new Date().toISOString(),
      };
      // The id of the refund the input names (a refund checks it): the NUL reaches the ledger.
      const workflowId = refundWorkflowId(ctx.tenant, key, intent.refundKey);
      const handle = await ctx.temporal.workflow.start<(input: RefundWorkflowInput) => Promise<Refund>>(refundWorkflowType, {
        taskQueue: ctx.taskQueue,
        workflowId,
        args: [{ intent, pending, policy: { activityStartToCloseMs: ctx.policy.activityStartToCloseMs } }],
      });
      await expectWorkflowFailure(handle.result(), 'LedgerDataRejected');
      return expectActivities(ctx, { workflowId }, ['refundCharge']);
    },
  },
  {
    name: 'agent-child-charge',
    about: 'an agent workflow charges through a child ChargeWorkflow',
    async record(ctx, key) {
      const { handle } = await startAgent(ctx, key);
      return { workflowId: handle.workflowId };
    },
  },
  {
    name: 'agent-reset-reads-ledger',
    about: 'the agent reset to its first task: Temporal refuses the second child start, the agent reads the outcome from the ledger',
    async record(ctx, key) {
      const { handle, result } = await startAgent(ctx, key);
      const history = await handle.fetchHistory();
      const firstTask = history.events?.find((e) => e.workflowTaskCompletedEventAttributes);
      const { runId } = await ctx.temporal.workflowService.resetWorkflowExecution({
        namespace: ctx.temporal.options.namespace,
        workflowExecution: { workflowId: handle.workflowId, runId: result.runId },
        reason: 'history recorder: an agent replayed from its start',
        workflowTaskFinishEventId: firstTask?.eventId,
        requestId: randomUUID(),
      });
      if (!runId) throw new Error('the reset returned no run id');
      const reset = ctx.temporal.workflow.getHandle<(input: OrderAgentInput) => Promise<OrderAgentResult>>(
        handle.workflowId,
        runId,
        { followRuns: false },
      );
      const again = await reset.result();
      if (JSON.stringify(again.charges) !== JSON.stringify(result.charges)) throw new Error('the reset agent reported other charges');
      return { workflowId: handle.workflowId, runId };
    },
  },
  {
    name: 'charge-first-task-delayed-queried',
    about: 'automatic capture whose first workflow task waited in the queue past the task heartbeat deadline, with a status query waiting on it (the timing the chaos run recorded)',
    async record(ctx, key) {
      return ctx.withLateWorker(
        async (taskQueue) => {
          const { handle } = await ctx.client({}, taskQueue).startCharge(ctx.tenant, key, ctx.body(1_050));
          // Answered only once the worker takes the task: the query rides on that first task.
          const queried = handle.query<Charge>('status').then(
            (charge) => charge,
            () => null,
          );
          return { handle, queried };
        },
        async ({ handle, queried }) => {
          expectCharge(await handle.result(), { status: 'succeeded' });
          await queried;
          return chargeRef(ctx, key);
        },
      );
    },
  },
  {
    name: 'charge-manual-first-task-delayed',
    about: 'manual capture whose first workflow task waited in the queue past the task heartbeat deadline, then captured: ChargeStatus reserved while it waited',
    async record(ctx, key) {
      return ctx.withLateWorker(
        (taskQueue) => ctx.client({}, taskQueue).startCharge(ctx.tenant, key, ctx.body(2_050, 'manual')),
        async () => {
          const client = ctx.client();
          expectCharge(await client.captureCharge(ctx.tenant, key), { status: 'succeeded', amountCapturedMinor: 2_050 });
          return chargeRef(ctx, key);
        },
      );
    },
  },
  {
    name: 'charge-compensation-retrying-indexed',
    about: 'a cancelled manual hold whose Cancel keeps failing past the alert time: ChargeStatus says cancelling, Cancel goes on until it succeeds',
    async record(ctx, key) {
      let failures = 0;
      const failingUntilMs = { value: Number.POSITIVE_INFINITY };
      ctx.onStep('cancel', key, () => {
        if (Date.now() >= failingUntilMs.value) return;
        failures++;
        throw sqlError('57P03', 'the database system is starting up');
      });
      const client = ctx.client({ compensationAlertAfterMs: 1_000 });
      expectCharge((await client.charge(ctx.tenant, key, ctx.body(2_100, 'manual'))).charge, { status: 'reserved' });
      failingUntilMs.value = Date.now() + 4_000;
      expectCharge(await client.cancelCharge(ctx.tenant, key), { status: 'cancelled' });
      if (failures < 2) throw new Error(`expected Cancel to fail and be retried, it failed ${failures} time(s)`);
      const history = await ctx.temporal.workflow.getHandle(chargeWorkflowId(ctx.tenant, key)).fetchHistory();
      const statuses = (history.events ?? []).flatMap((event) => {
        const payload = event.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields?.['ChargeStatus'];
        return payload ? [Buffer.from(payload.data ?? []).toString()] : [];
      });
      if (JSON.stringify(statuses) !== JSON.stringify(['"reserved"', '"cancelling"'])) {
        throw new Error(`expected ChargeStatus reserved then cancelling, the history upserted ${JSON.stringify(statuses)}`);
      }
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'refund-first-task-delayed',
    about: 'a refund whose first workflow task waited in the queue past the task heartbeat deadline',
    async record(ctx, key) {
      expectCharge((await ctx.client().charge(ctx.tenant, key, ctx.body(1_000))).charge, { status: 'succeeded' });
      return ctx.withLateWorker(
        async (taskQueue) => {
          const refunded = ctx.client({}, taskQueue).refund(ctx.tenant, key, 'refund-1', { amount: 300 });
          return { refunded };
        },
        async ({ refunded }) => {
          const { refund } = await refunded;
          if (refund.status !== 'succeeded') throw new Error(`expected the refund to succeed, it is ${refund.status}`);
          return { workflowId: refundWorkflowId(ctx.tenant, key, 'refund-1') };
        },
      );
    },
  },
  {
    name: 'release-hold-first-task-delayed',
    about: 'a release of an orphaned hold whose first workflow task waited in the queue past the task heartbeat deadline',
    async record(ctx, key) {
      await orphanedHold(ctx, ctx.tenant, key, 1_350);
      return ctx.withLateWorker(
        async (taskQueue) => ({ released: releaseHoldOf(ctx, key, taskQueue) }),
        async ({ released }) => {
          const { charge, ref } = await released;
          if (charge?.status !== 'cancelled') throw new Error(`expected the hold released, got ${JSON.stringify(charge)}`);
          return ref;
        },
      );
    },
  },
  {
    name: 'hold-sweep-first-task-delayed',
    about: 'a sweep whose first workflow task waited in the queue past the task heartbeat deadline',
    async record(ctx, key) {
      const tenant = await ctx.ownTenant(key);
      await expiredHold(ctx, tenant, 'expired-1', 300);
      return ctx.withLateWorker(
        async (taskQueue) => ({ swept: sweep(ctx, tenant, key, 10, taskQueue) }),
        async ({ swept }) => {
          const { result, ref } = await swept;
          if (result.expiredReleased !== 1) throw new Error(`expected one expired hold released, the sweep answered ${JSON.stringify(result)}`);
          return ref;
        },
      );
    },
  },
  {
    name: 'agent-first-task-delayed',
    about: "an agent workflow whose first workflow task (and its child charge's) waited in the queue past the task heartbeat deadline",
    async record(ctx, key) {
      return ctx.withLateWorker(
        (taskQueue) => startAgentOn(ctx, key, taskQueue),
        async (handle) => {
          await agentResult(handle);
          return { workflowId: handle.workflowId };
        },
      );
    },
  },
  {
    name: 'provider-charge-automatic-succeeded',
    about: 'a provider charge: ledger Try on the clearing account, provider authorize, provider capture with the ledger Confirm',
    async record(ctx, key) {
      const handle = await startProviderCharge(ctx, key, 'pm_card_visa');
      expectCharge(await handle.result(), { status: 'succeeded', amountCapturedMinor: 1_000 });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'authorizeAtProvider', 'captureAtProvider']);
    },
  },
  {
    name: 'provider-charge-declined',
    about: 'the provider declines the card: the ledger declines the charge and releases its hold in the same step',
    async record(ctx, key) {
      const handle = await startProviderCharge(ctx, key, 'pm_card_visa_chargeDeclinedInsufficientFunds');
      expectCharge(await handle.result(), { status: 'declined' });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'authorizeAtProvider']);
    },
  },
  {
    name: 'provider-charge-manual-captured-partially',
    about: 'a provider hold captured in part by a capture update',
    async record(ctx, key) {
      const handle = await startProviderCharge(ctx, key, 'pm_card_mastercard', { amountMinor: 2_000, captureMode: 'manual' });
      await untilStatus(ctx, key, (charge) => charge.provider?.state === 'authorized');
      expectCharge(await handle.executeUpdate(captureChargeUpdate, { args: [{ amountMinor: 1_500 }] }), { status: 'succeeded', amountCapturedMinor: 1_500 });
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'provider-charge-manual-cancelled',
    about: 'a provider hold cancelled by an update: the ledger cancels, then the provider voids',
    async record(ctx, key) {
      const handle = await startProviderCharge(ctx, key, 'pm_card_visa', { captureMode: 'manual' });
      await untilStatus(ctx, key, (charge) => charge.provider?.state === 'authorized');
      expectCharge(await handle.executeUpdate(cancelChargeUpdate), { status: 'cancelled', failureReason: 'requested_by_caller' });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'authorizeAtProvider', 'cancelCharge', 'voidAtProvider']);
    },
  },
  {
    name: 'provider-charge-requires-action-completed',
    about: '3-D Secure: the charge waits for the payer, a provider event wakes it, the payment is looked up and captured',
    async record(ctx, key) {
      const handle = await startProviderCharge(ctx, key, 'pm_card_threeDSecure2Required');
      const waiting = await untilStatus(ctx, key, (charge) => charge.status === 'requires_action');
      ctx.sim.payments.authenticate(waiting.provider!.paymentId!, true);
      await handle.signal(providerEventSignal, { eventId: `evt_${key}`, type: 'payment_intent.amount_capturable_updated', paymentId: waiting.provider!.paymentId });
      expectCharge(await handle.result(), { status: 'succeeded' });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'authorizeAtProvider', 'refreshProviderPayment', 'captureAtProvider']);
    },
  },
  {
    name: 'provider-charge-requires-action-event-during-authorize',
    about: 'provider-payer-events-counted-from-authorize: the payer authenticates and the provider event arrives before the authorize step has answered; the event wakes the wait at once, the charge is captured',
    async record(ctx, key) {
      const chargeId = chargeIdFor(ctx.tenant, key);
      // The provider's answer to authorize (requires_action, already saved) is held on its way back
      // until the payer has authenticated and the event has been accepted by Temporal.
      ctx.sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'hold_after_commit' }, times: 1, idempotencyKeyPrefix: chargeId });
      let handle;
      try {
        // A long hold: the periodic look comes a minute after the wait began, so only the event can end this soon.
        handle = await startProviderCharge(ctx, key, 'pm_card_threeDSecure2Required', { policy: { holdTtlMs: 600_000 } });
        const payment = await untilPayment(ctx, chargeId, (candidate) => candidate.status === 'requires_action');
        ctx.sim.payments.authenticate(payment.id, true);
        await handle.signal(providerEventSignal, { eventId: `evt_${key}`, type: 'payment_intent.amount_capturable_updated', paymentId: payment.id });
      } finally {
        ctx.sim.faults.clearFor(chargeId);
        ctx.sim.releaseHolds(); // no other path holds a provider answer
      }
      expectCharge(await handle.result(), { status: 'succeeded' });
      const history = await handle.fetchHistory();
      if ((history.events ?? []).some((event) => event.timerFiredEventAttributes)) {
        throw new Error('expected the event to wake the wait, but a timer fired (the periodic look)');
      }
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'authorizeAtProvider', 'refreshProviderPayment', 'captureAtProvider']);
    },
  },
  {
    name: 'provider-charge-requires-action-redirect',
    about: '3-D Secure with a return_url (in the input and its fingerprint): the payer is redirected, a provider event wakes the charge, it is captured',
    async record(ctx, key) {
      const handle = await startProviderCharge(ctx, key, 'pm_card_threeDSecure2Required', { returnUrl: 'https://shop.example/orders/back' });
      const waiting = await untilStatus(ctx, key, (charge) => charge.status === 'requires_action');
      if ((waiting.provider?.nextAction as { type?: unknown } | null)?.type !== 'redirect_to_url') {
        throw new Error(`expected a redirect_to_url next action, got ${JSON.stringify(waiting.provider?.nextAction)}`);
      }
      ctx.sim.payments.authenticate(waiting.provider!.paymentId!, true);
      await handle.signal(providerEventSignal, { eventId: `evt_${key}`, type: 'payment_intent.amount_capturable_updated', paymentId: waiting.provider!.paymentId });
      expectCharge(await handle.result(), { status: 'succeeded' });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'authorizeAtProvider', 'refreshProviderPayment', 'captureAtProvider']);
    },
  },
  {
    name: 'provider-charge-requires-action-event-lost',
    about: '3-D Secure completed but no provider event arrives: the look before the hold expires finds the authorization, the charge is captured',
    async record(ctx, key) {
      const handle = await startProviderCharge(ctx, key, 'pm_card_threeDSecure2Required', { policy: { holdTtlMs: 2_000 } });
      const waiting = await untilStatus(ctx, key, (charge) => charge.status === 'requires_action');
      ctx.sim.payments.authenticate(waiting.provider!.paymentId!, true);
      expectCharge(await handle.result(), { status: 'succeeded' });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'authorizeAtProvider', 'refreshProviderPayment', 'captureAtProvider']);
    },
  },
  {
    name: 'provider-charge-requires-action-manual-margin-look',
    about: 'manual 3-D Secure completed, no provider event: the look at the hold expiry less the capture margin finds the authorization, the charge is reserved in time and the caller captures it',
    async record(ctx, key) {
      // A 6 s hold: margin min(10 s attempt, 3 s), so the margin look is 3 s in and the hold valid 3 s more.
      const handle = await startProviderCharge(ctx, key, 'pm_card_threeDSecure2Required', { captureMode: 'manual', policy: { holdTtlMs: 6_000 } });
      const waiting = await untilStatus(ctx, key, (charge) => charge.status === 'requires_action');
      ctx.sim.payments.authenticate(waiting.provider!.paymentId!, true);
      await untilStatus(ctx, key, (charge) => charge.status === 'reserved');
      expectCharge(await handle.executeUpdate(captureChargeUpdate, { args: [{ amountMinor: null }] }), { status: 'succeeded' });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'authorizeAtProvider', 'refreshProviderPayment', 'captureAtProvider']);
    },
  },
  {
    name: 'provider-charge-requires-action-found-at-last-look',
    about: '3-D Secure completed inside the capture margin, no provider event: the margin look still finds the payer acting, the last look at the hold expiry finds the authorization and the charge is captured',
    async record(ctx, key) {
      const handle = await startProviderCharge(ctx, key, 'pm_card_threeDSecure2Required', { policy: { holdTtlMs: 6_000 } });
      const waiting = await untilStatus(ctx, key, (charge) => charge.status === 'requires_action');
      await untilActivityCompleted(ctx, chargeRef(ctx, key), 'refreshProviderPayment');
      ctx.sim.payments.authenticate(waiting.provider!.paymentId!, true);
      expectCharge(await handle.result(), { status: 'succeeded' });
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'authorizeAtProvider', 'refreshProviderPayment', 'refreshProviderPayment', 'captureAtProvider']);
    },
  },
  {
    name: 'provider-charge-requires-action-expired',
    about: '3-D Secure never completed: the hold TTL passes, the ledger cancels and the provider voids',
    async record(ctx, key) {
      const handle = await startProviderCharge(ctx, key, 'pm_card_threeDSecure2Required', { policy: { holdTtlMs: 500 } });
      expectCharge(await handle.result(), { status: 'cancelled', failureReason: cancelReasons.payerActionExpired });
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'provider-charge-authorize-budget-exhausted',
    about: 'the provider gives no answer to authorize for its whole budget (the first attempt did authorize): cancelled, the authorization found by reference and voided',
    async record(ctx, key) {
      // Only this charge's requests (its id starts every key of its steps): the other paths run alongside.
      const idempotencyKeyPrefix = chargeIdFor(ctx.tenant, key);
      ctx.sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'error_after_commit', status: 500 }, times: 1, idempotencyKeyPrefix });
      ctx.sim.addFault({ operation: 'create_payment_intent', fault: { kind: 'error_before_commit', status: 503 }, times: 10_000, idempotencyKeyPrefix });
      try {
        const handle = await startProviderCharge(ctx, key, 'pm_card_visa', { policy: { providerAuthorizeBudgetMs: 2_000 } });
        expectCharge(await handle.result(), { status: 'cancelled', failureReason: cancelReasons.providerUnavailable });
      } finally {
        ctx.sim.faults.clearFor(idempotencyKeyPrefix);
      }
      return chargeRef(ctx, key);
    },
  },
  {
    name: 'provider-charge-void-retried-cancelling',
    about: 'provider-void-alerts: the provider refuses every void past the alert time; ChargeStatus says cancelling, the cancel is answered cancelling, the void goes on until the provider takes it',
    async record(ctx, key) {
      const idempotencyKeyPrefix = chargeIdFor(ctx.tenant, key);
      const handle = await startProviderCharge(ctx, key, 'pm_card_visa', { captureMode: 'manual', policy: { providerVoidAlertAfterMs: 1_000 } });
      await untilStatus(ctx, key, (charge) => charge.provider?.state === 'authorized');
      ctx.sim.addFault({ operation: 'cancel_payment_intent', fault: { kind: 'error_before_commit', status: 503 }, times: 10_000, idempotencyKeyPrefix });
      try {
        expectCharge(await handle.executeUpdate(cancelChargeUpdate), { status: 'cancelling', failureReason: 'requested_by_caller' });
      } finally {
        ctx.sim.faults.clearFor(idempotencyKeyPrefix);
      }
      expectCharge(await handle.result(), { status: 'cancelled', failureReason: 'requested_by_caller' });
      const history = await handle.fetchHistory();
      const statuses = (history.events ?? []).flatMap((event) => {
        const payload = event.upsertWorkflowSearchAttributesEventAttributes?.searchAttributes?.indexedFields?.['ChargeStatus'];
        return payload ? [Buffer.from(payload.data ?? []).toString()] : [];
      });
      if (JSON.stringify(statuses) !== JSON.stringify(['"reserved"', '"cancelling"'])) {
        throw new Error(`expected ChargeStatus reserved then cancelling, the history upserted ${JSON.stringify(statuses)}`);
      }
      return expectActivities(ctx, chargeRef(ctx, key), ['tryCharge', 'authorizeAtProvider', 'cancelCharge', 'voidAtProvider', 'voidAtProvider']);
    },
  },
  {
    name: 'provider-charge-capture-refused',
    about: 'the authorization was voided at the provider behind our back: capture is refused for good, the charge is cancelled',
    async record(ctx, key) {
      const handle = await startProviderCharge(ctx, key, 'pm_card_visa', { captureMode: 'manual' });
      const held = await untilStatus(ctx, key, (charge) => charge.provider?.state === 'authorized');
      ctx.sim.payments.cancel(held.provider!.paymentId!, {});
      const captured = await handle.executeUpdate(captureChargeUpdate, { args: [{ amountMinor: null }] }).catch((error: unknown) => error);
      if (!(captured instanceof Error)) throw new Error('the capture of a voided authorization was accepted');
      expectCharge(await handle.result(), { status: 'cancelled', failureReason: cancelReasons.providerCaptureRefused });
      return chargeRef(ctx, key);
    },
  },
];
