import { WorkflowNotFoundError } from '@temporalio/client';
import type { Charge, ChargeIntent } from '../domain/charge.js';
import { decidedStatuses } from '../domain/charge.js';
import { cancelReasons } from '../domain/refusals.js';
import { readCharge, type LedgerCharge } from '../ledger/charges.js';
import { chargeStatusQuery } from '../../workflows/definitions.js';
import type { ServiceContext } from './context.js';
import { NotFoundError } from './errors.js';
import { applicationFailureIn } from './temporal-failures.js';
import { chargeHandle, startOrAttachCharge, type ChargeHandle } from './start-or-attach.js';
import { assertIdempotencyKey, assertTenant } from './validation.js';
import { payerActionNeeded, waitForOutcome, waitForReservation } from './waiting.js';

/** What a charge call answers: the charge, whether this call replayed an earlier one, and whether it is decided. */
export interface ChargeReply {
  charge: Charge;
  /** True when the key was already known: this call started nothing. */
  replayed: boolean;
  /**
   * False while the charge is not decided: the wait budget ran out first, or the payer must act
   * (`requires_action`, 3-D Secure). The charge goes on and the same call later returns it; the
   * HTTP API answers 202 + Location + Retry-After for it, on the first request and every repeat.
   */
  completed: boolean;
}

/** Starts the charge or attaches to it, and waits at most `waitMs` for its outcome. */
export async function charge(ctx: ServiceContext, intent: ChargeIntent, waitMs: number): Promise<ChargeReply> {
  const attached = await startOrAttachCharge(ctx, intent);
  if ('settled' in attached) return { charge: attached.settled, replayed: true, completed: true };
  const { handle, started } = attached;
  // A provider charge may stop for the payer (3-D Secure): the caller is answered then, with the
  // provider's next action, instead of after its whole wait.
  const outcome =
    intent.request.captureMode === 'manual'
      ? await waitForReservation(ctx, intent.tenant, intent.idempotencyKey, handle, waitMs)
      : intent.request.paymentMethod
        ? await waitForReservation(ctx, intent.tenant, intent.idempotencyKey, handle, waitMs, payerActionNeeded)
        : await waitForOutcome(ctx, handle, waitMs);
  // A charge waiting for its payer is answered at once (the caller must hand next_action on) but is
  // not decided: a client following the status table must not take an unauthenticated charge as final.
  if (outcome) return { charge: outcome, replayed: !started, completed: outcome.status !== 'requires_action' };
  return { charge: await handle.query(chargeStatusQuery), replayed: !started, completed: false };
}

/** Starts the charge (or attaches) without waiting. */
export async function startCharge(ctx: ServiceContext, intent: ChargeIntent): Promise<{ handle: ChargeHandle; replayed: boolean }> {
  const attached = await startOrAttachCharge(ctx, intent);
  if ('settled' in attached) return { handle: chargeHandle(ctx, intent.tenant, intent.idempotencyKey), replayed: true };
  return { handle: attached.handle, replayed: !attached.started };
}

/** The charge as it stands now: the ledger once decided (refunds included), the workflow while open. */
export async function getCharge(ctx: ServiceContext, tenant: string, idempotencyKey: string): Promise<Charge> {
  assertTenant(tenant);
  assertIdempotencyKey(idempotencyKey);
  const row = await readCharge(ctx.ledger, tenant, idempotencyKey);
  // Cancelling: the ledger cancelled and the provider's hold is still being voided, which is what
  // the row says and the workflow (busy with the void) would not.
  if (row && (decidedStatuses.has(row.charge.status) || row.charge.status === 'cancelling')) return row.charge;
  try {
    const handle = chargeHandle(ctx, tenant, idempotencyKey);
    const description = await handle.describe();
    if (description.status.name === 'RUNNING') return await handle.query(chargeStatusQuery);
    // Read again: the workflow closed after the first read, so the row may have been decided since.
    const settled = await readCharge(ctx.ledger, tenant, idempotencyKey);
    if (settled) return orphanedOrAsIs(settled);
    return await closedWithoutRow(handle, description.status.name, idempotencyKey);
  } catch (error) {
    if (error instanceof WorkflowNotFoundError) {
      if (row) return orphanedOrAsIs(row);
      throw new NotFoundError(`no charge with idempotency key ${idempotencyKey}`);
    }
    throw error;
  }
}

/**
 * A charge workflow that closed without the ledger ever recording its key. Completed: its result is
 * the charge (cancelled before anything was held). Any other ending (a start the service did not
 * make refused, an input the worker could not decode, terminated, timed out) charged nothing: there
 * is no charge under the key, and the 404 says why the key's workflow ended.
 */
export async function closedWithoutRow(handle: ChargeHandle, status: string, idempotencyKey: string): Promise<Charge> {
  if (status === 'COMPLETED') return handle.result();
  const failure = status === 'FAILED' ? await handle.result().then(() => null, (error: unknown) => applicationFailureIn(error)) : null;
  const why = failure?.type ? `${failure.type}: ${failure.message}` : `its workflow ended ${status.toLowerCase()}`;
  throw new NotFoundError(`no charge with idempotency key ${idempotencyKey}: nothing was charged under it (${why.slice(0, 500)})`);
}

/**
 * A row read after its ChargeWorkflow was found closed or forgotten. Still TRIED means nothing will
 * capture it: the money is still held (so the status stays reserved, as the balances say), and
 * failure_reason says it is being released (by the sweeper, or at once by a cancel).
 */
export function orphanedOrAsIs(row: LedgerCharge): Charge {
  return row.holdState === 'TRIED' ? { ...row.charge, failureReason: cancelReasons.holdOrphaned } : row.charge;
}
