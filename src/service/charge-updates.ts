import { WorkflowNotFoundError, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError } from '@temporalio/client';
import type { Charge } from '../domain/charge.js';
import { cancelRefusal, captureRefusal } from '../domain/charge-rules.js';
import { cancelReasons } from '../domain/refusals.js';
import { readCharge } from '../ledger/charges.js';
import {
  cancelChargeUpdate,
  captureChargeUpdate,
  releaseHoldWorkflowId,
  releaseHoldWorkflowType,
  type ReleaseHoldInput,
} from '../../workflows/definitions.js';
import type { ReleaseHoldWorkflow } from '../../workflows/hold-sweeper.js';
import { closedWithoutRow, orphanedOrAsIs } from './charges.js';
import type { ServiceContext } from './context.js';
import { NotFoundError, UnavailableError } from '../domain/errors.js';
import { chargeHandle, type ChargeHandle } from './start-or-attach.js';
import { isCompletedDuringUpdate, stateConflict, stateConflictFrom } from './temporal-failures.js';
import { grpcCodeOf, grpcStatus } from './unavailable.js';
import { assertIdempotencyKey } from './validation.js';
import { assertTenant } from '../domain/identifiers.js';
import { waitForOutcome } from './waiting.js';

/**
 * Cancel and capture: an Update while the charge's workflow runs (the workflow judges, by the
 * domain's rules); once it has closed, the ledger row judged here by the same rules.
 */

/** A repeated cancel returns the cancelled charge; a cancel after success is refused. */
export async function cancelCharge(ctx: ServiceContext, tenant: string, idempotencyKey: string): Promise<Charge> {
  const judge = (charge: Charge): Charge => {
    const refusal = cancelRefusal(charge);
    if (refusal) throw stateConflict(refusal);
    return charge;
  };
  return updateOrJudge(ctx, tenant, idempotencyKey, (handle) => handle.executeUpdate(cancelChargeUpdate), judge, async () =>
    judge(await releaseOrphanedHold(ctx, tenant, idempotencyKey)),
  );
}

/** Captures all that is reserved (`amountMinor` null) or `amountMinor` of it; the rest is released. */
export async function captureCharge(
  ctx: ServiceContext,
  tenant: string,
  idempotencyKey: string,
  amountMinor: number | null,
): Promise<Charge> {
  return updateOrJudge(
    ctx,
    tenant,
    idempotencyKey,
    (handle) => handle.executeUpdate(captureChargeUpdate, { args: [{ amountMinor }] }),
    (charge) => {
      const refusal = captureRefusal(charge, amountMinor);
      if (refusal) throw stateConflict(refusal);
      return charge;
    },
    // Nothing may capture a hold whose workflow is gone: that workflow was the one place that
    // decides between capture and void, and it may have been stopped on purpose. A request the
    // workflow would have refused anyway is told that reason first.
    (held) => {
      throw stateConflict(
        captureRefusal(held, amountMinor) ?? {
          name: 'holdOrphaned',
          detail: `charge ${idempotencyKey} cannot be captured: its workflow ended without settling the hold`,
        },
      );
    },
  );
}

/**
 * The hold's workflow closed without settling it. The caller asks for exactly what must happen
 * anyway, so it is done now, as a void of a card authorisation is, rather than refused while the
 * sweeper gets round to it: a release workflow runs the ledger's idempotent Cancel (racing the
 * sweeper is harmless: the first Cancel wins, both answer it).
 */
async function releaseOrphanedHold(ctx: ServiceContext, tenant: string, idempotencyKey: string): Promise<Charge> {
  const input: ReleaseHoldInput = {
    tenant,
    idempotencyKey,
    reason: cancelReasons.requestedByCaller,
    activityStartToCloseMs: ctx.policy.activityStartToCloseMs,
  };
  const release = await ctx.temporal.workflow.start<typeof ReleaseHoldWorkflow>(releaseHoldWorkflowType, {
    taskQueue: ctx.taskQueue,
    workflowId: releaseHoldWorkflowId(tenant, idempotencyKey),
    args: [input],
    workflowIdReusePolicy: 'ALLOW_DUPLICATE',
    workflowIdConflictPolicy: 'USE_EXISTING',
  });
  const released = await waitForOutcome(ctx, release, ctx.waitBudgetMs);
  if (!released) {
    // The ledger's Cancel done and the provider's void still retried (it keeps failing, or this
    // worker has no connector for it): the charge is cancelling, and that is the answer.
    const row = await readCharge(ctx.ledger, tenant, idempotencyKey);
    if (row?.holdState === 'CANCELLED') return row.charge;
    // The release goes on; the same cancel later answers the cancelled charge.
    throw new UnavailableError('database', `the hold of charge ${idempotencyKey} is still being released; retry the cancel`);
  }
  return released;
}

/**
 * The update, or, when no answer came in time (the workflow is busy retrying a void the provider
 * keeps refusing, and workflows started before provider-void-alerts wait for it), the ledger's: a
 * row the ledger cancelled is the truth about this charge whatever the workflow is still doing at
 * the provider, so the cancel is answered from it (`cancelling` or `cancelled`; a capture, refused)
 * instead of a 503 that says no worker answered. A row still held says nothing: the 503 stands.
 */
async function updateOrLedger(
  ctx: ServiceContext,
  tenant: string,
  idempotencyKey: string,
  handle: ChargeHandle,
  update: (handle: ChargeHandle) => Promise<Charge>,
  judge: (charge: Charge) => Charge,
): Promise<Charge> {
  try {
    return await update(handle);
  } catch (error) {
    if (!noAnswerInTime(error)) throw error;
    const row = await readCharge(ctx.ledger, tenant, idempotencyKey).catch(() => null);
    if (row?.holdState !== 'CANCELLED') throw error;
    return judge(row.charge);
  }
}

/** The update was not answered in time: the worker's verdict (the API's interceptor), or the RPC's own timeout. */
function noAnswerInTime(error: unknown): boolean {
  if (error instanceof UnavailableError) return error.dependency !== 'database';
  if (error instanceof WorkflowUpdateRPCTimeoutOrCancelledError) return true;
  const code = grpcCodeOf(error);
  return code === grpcStatus.DEADLINE_EXCEEDED || code === grpcStatus.CANCELLED;
}

/**
 * Sends an update to a running charge; once the workflow is closed (or forgotten), the ledger row
 * is the answer and `judge` decides whether it satisfies the request. Unknown keys start nothing.
 */
async function updateOrJudge(
  ctx: ServiceContext,
  tenant: string,
  idempotencyKey: string,
  update: (handle: ChargeHandle) => Promise<Charge>,
  judge: (charge: Charge) => Charge,
  orphaned: (held: Charge) => Promise<Charge> | Charge,
): Promise<Charge> {
  assertTenant(tenant);
  assertIdempotencyKey(idempotencyKey);
  const handle = chargeHandle(ctx, tenant, idempotencyKey);
  let closed = false;
  try {
    const description = await handle.describe();
    if (description.status.name === 'RUNNING') return await updateOrLedger(ctx, tenant, idempotencyKey, handle, update, judge);
    closed = true;
  } catch (error) {
    // An update accepted just as the workflow closed is answered by the ledger, not refused.
    const completedMeanwhile = error instanceof WorkflowNotFoundError || isCompletedDuringUpdate(error);
    if (!completedMeanwhile && error instanceof WorkflowUpdateFailedError) throw stateConflictFrom(error.cause) ?? error;
    if (!completedMeanwhile) throw error;
    closed = !(error instanceof WorkflowNotFoundError);
  }
  const row = await readCharge(ctx.ledger, tenant, idempotencyKey);
  // Still held after its workflow closed (terminated, reset) or was forgotten: no workflow will
  // settle it, so neither "already succeeded" nor "reserved" would be true.
  if (row?.holdState === 'TRIED') return orphaned(orphanedOrAsIs(row));
  if (row) return judge(row.charge);
  // Decided without a ledger row (values the ledger rejects): the workflow's result is the record.
  if (closed) return judge(await closedWithoutRow(handle, (await handle.describe()).status.name, idempotencyKey));
  throw new NotFoundError(`no charge with idempotency key ${idempotencyKey}`);
}
