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
import { RefundRefusedError, type ChargeClient } from '../src/client/charge-client.js';
import { chargeWorkflowId, type Charge } from '../src/domain/charge.js';
import { refundWorkflowId } from '../src/domain/refund.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import {
  cancelChargeUpdate,
  chargeWorkflowType,
  type ChargePolicy,
  type ChargeWorkflowInput,
} from '../workflows/definitions.js';
import type { OrderAgentInput, OrderAgentResult } from '../workflows/sample-agent-workflow.js';

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
  /** A client on the recorder's task queue, with the recorder's policy overridden by `policy`. */
  client(policy?: Partial<ChargePolicy>): ChargeClient;
  body(amountMinor: number, capture?: 'automatic' | 'manual'): Record<string, unknown>;
  /** Runs `hook` before every attempt of this step for this key (throw to make the step fail). */
  onStep(step: LedgerStep, key: string, hook: () => void | Promise<void>): void;
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

/** A second execution for a key the ledger already knows: what happens once Temporal forgot the key (after retention). */
async function startAnotherExecution(ctx: RecordingContext, key: string, body: Record<string, unknown>) {
  const input: ChargeWorkflowInput = { intent: ctx.client().buildIntent(ctx.tenant, key, body), policy: ctx.policy };
  return ctx.temporal.workflow.start<(input: ChargeWorkflowInput) => Promise<Charge>>(chargeWorkflowType, {
    taskQueue: ctx.taskQueue,
    workflowId: `${chargeWorkflowId(ctx.tenant, key)}/after-retention`,
    args: [input],
  });
}

function injectedRefusal(what: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(`injected by the history recorder: ${what}`, 'InjectedFault');
}

async function startAgent(ctx: RecordingContext, key: string) {
  const input: OrderAgentInput = {
    intents: [ctx.client().buildIntent(ctx.tenant, key, ctx.body(1_200))],
    policy: ctx.policy,
    chargeTaskQueue: ctx.taskQueue,
  };
  const handle = await ctx.temporal.workflow.start<(input: OrderAgentInput) => Promise<OrderAgentResult>>(
    'OrderAgentWorkflow',
    { taskQueue: ctx.taskQueue, workflowId: `agent/${ctx.tenant}/${key}`, args: [input] },
  );
  const result = await handle.result();
  if (result.charges.length !== 1) throw new Error(`the agent reported ${result.charges.length} charges, not 1`);
  expectCharge(result.charges[0]!, { status: 'succeeded' });
  return { handle, result };
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
      expectCharge((await ctx.client().charge(ctx.tenant, key, ctx.body(1_000))).charge, { status: 'cancelled' });
      return chargeRef(ctx, key);
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
      return chargeRef(ctx, key);
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
    about: 'a new execution for a key the ledger holds for another request: Try refuses it (IdempotencyConflict) and the workflow fails',
    async record(ctx, key) {
      expectCharge((await ctx.client().charge(ctx.tenant, key, ctx.body(1_000))).charge, { status: 'succeeded' });
      const handle = await startAnotherExecution(ctx, key, ctx.body(1_001));
      const error = await handle.result().then(
        () => null,
        (e: unknown) => e,
      );
      // Only that it fails: which refusal it fails with is the workflow's business (and the tests').
      if (!(error instanceof WorkflowFailedError)) throw new Error(`expected the workflow to fail, got ${String(error)}`);
      return { workflowId: handle.workflowId };
    },
  },
  {
    name: 'charge-try-after-cancel',
    about: 'a new execution for a key whose charge was cancelled: Try refuses to reserve (HoldCancelled), the charge stays cancelled',
    async record(ctx, key) {
      const client = ctx.client();
      const body = ctx.body(1_000, 'manual');
      expectCharge((await client.charge(ctx.tenant, key, body)).charge, { status: 'reserved' });
      expectCharge(await client.cancelCharge(ctx.tenant, key), { status: 'cancelled' });
      const handle = await startAnotherExecution(ctx, key, body);
      expectCharge(await handle.result(), { status: 'cancelled', failureReason: 'requested_by_caller' });
      return { workflowId: handle.workflowId };
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
];
