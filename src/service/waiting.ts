import { isGrpcCancelledError, isGrpcDeadlineError } from '@temporalio/client';
import type { Charge } from '../domain/charge.js';
import { readCharge } from '../ledger/charges.js';
import type { ServiceContext } from './context.js';

/**
 * How often a manual-capture create reads the ledger row while waiting for its reservation: soon
 * at first (a Try takes a few milliseconds), then backing off, so that a slow Try costs the ledger
 * at most one read per interval per waiting caller.
 */
export const reservationPollFirstIntervalMs = 20;
export const reservationPollMaxIntervalMs = 200;

/** A caller's wait, which can shorten the service's wait budget but never lengthen it. */
export function boundedWaitMs(requestedWaitMs: number | undefined, waitBudgetMs: number): number {
  return Math.min(requestedWaitMs ?? waitBudgetMs, waitBudgetMs);
}

/**
 * Waits at most `waitMs` for the workflow's result; null when the wait ran out. The wait is a gRPC
 * deadline on the long poll, so nothing keeps polling after the caller has been answered.
 */
export async function waitForOutcome<T>(ctx: ServiceContext, handle: { result(): Promise<T> }, waitMs: number): Promise<T | null> {
  if (waitMs <= 0) return null;
  const deadlineMs = Date.now() + waitMs;
  try {
    return await ctx.temporal.withDeadline(deadlineMs, () => handle.result());
  } catch (error) {
    if (isGrpcDeadlineError(error) || isGrpcDeadlineError((error as Error).cause)) return null;
    // Past our own deadline, the long poll can also end as CANCELLED (the client's retry layer
    // cancels the call it was about to retry): that is the wait running out, not Temporal being
    // down. Seen once in CI on a loaded machine, answered as "Temporal is unreachable".
    if (Date.now() >= deadlineMs && (isGrpcCancelledError(error) || isGrpcCancelledError((error as Error).cause))) return null;
    throw error;
  }
}

/**
 * A manual-capture charge stays open until it is captured, so its create is answered by the
 * reservation (or the decline), as a card authorisation is. The ledger row is polled rather than
 * the workflow queried, so callers waiting here cost the worker nothing; once the workflow has
 * closed, its result is the answer, as for automatic capture.
 */
export async function waitForReservation(
  ctx: ServiceContext,
  tenant: string,
  idempotencyKey: string,
  handle: { result(): Promise<Charge> },
  waitMs: number,
  /** Which ledger state answers the caller before the workflow closes. */
  settles: (charge: Charge) => boolean = reservationSettled,
): Promise<Charge | null> {
  if (waitMs <= 0) return null;
  const abort = new AbortController();
  // Settles, never rejects: the workflow can fail (terminated, say) while this loop is busy reading
  // the ledger, and a rejection nobody is awaiting at that moment would take the process down.
  const closed: Promise<{ charge: Charge | null } | { error: unknown }> = ctx.temporal
    .withAbortSignal(abort.signal, () => waitForOutcome(ctx, handle, waitMs))
    .then(
      (charge) => ({ charge }),
      (error: unknown) => (abort.signal.aborted ? { charge: null } : { error }),
    );
  try {
    for (
      let pollIntervalMs = reservationPollFirstIntervalMs;
      ;
      pollIntervalMs = Math.min(pollIntervalMs * 2, reservationPollMaxIntervalMs)
    ) {
      const row = await readCharge(ctx.ledger, tenant, idempotencyKey);
      if (row && settles(row.charge)) return row.charge;
      const first = await Promise.race([
        closed,
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), pollIntervalMs)),
      ]);
      if (first === undefined) continue;
      if ('error' in first) throw first.error;
      return first.charge; // the workflow closed, or the wait budget ran out (null)
    }
  } finally {
    abort.abort();
  }
}

/**
 * A manual charge's hold is ready to be answered: held in the ledger and, for a provider charge,
 * authorized at the provider too (a ledger hold whose authorize is unanswered is not yet a hold
 * on the card); or waiting for the payer, who must be told how to act.
 */
export function reservationSettled(charge: Charge): boolean {
  if (charge.status === 'requires_action') return true;
  if (charge.status !== 'reserved') return false;
  return charge.provider === undefined || charge.provider.state === 'authorized';
}

/** An automatic provider charge answers early only when the payer must act (3-D Secure). */
export function payerActionNeeded(charge: Charge): boolean {
  return charge.status === 'requires_action';
}
