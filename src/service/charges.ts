import { WorkflowNotFoundError } from '@temporalio/client';
import type { ChargeMemo } from '../../workflows/definitions.js';
import type { ReleaseSlot } from './admission.js';
import { grpcCodeOf, grpcStatus } from './unavailable.js';
import type { Charge, ChargeIntent } from '../domain/charge.js';
import { chargeWorkflowId, decidedStatuses } from '../domain/charge.js';
import { cancelReasons } from '../domain/refusals.js';
import { readCharge, type LedgerCharge } from '../ledger/charges.js';
import { chargeStatusQuery } from '../../workflows/definitions.js';
import { pendingCharge } from '../../workflows/charge-state.js';
import type { ServiceContext } from './context.js';
import { NotFoundError } from '../domain/errors.js';
import { applicationFailureIn } from './temporal-failures.js';
import { chargeHandle, startOrAttachCharge, type ChargeHandle } from './start-or-attach.js';
import { assertIdempotencyKey } from './validation.js';
import { assertTenant } from '../domain/identifiers.js';
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

/** What the caller already knows about a new charge's key, and where its admission check reports its duration. */
export interface AdmissionHints {
  /**
   * Whether the ledger had a charge under the key when the caller read it just before (the HTTP
   * API's rate-limit statement reads it anyway, for the open holds): the admission check of a full
   * process then makes no ledger read of its own. Absent: it reads the ledger itself.
   */
  ledgerKnowsKey?: boolean;
  /** Called once the admission check has decided, with when it began (performance.now()): Server-Timing `admission`. */
  onAdmitted?: (startedAtMs: number) => void;
  /**
   * What must be written before the charge may start, and only once it has been admitted: an
   * Idempotency-Token's redemption, so that a refused request leaves its token unused. Its failure
   * is the request's answer, and the place is given back.
   */
  beforeStart?: () => Promise<void>;
}

/** Starts the charge or attaches to it, and waits at most `waitMs` for its outcome. */
export async function charge(ctx: ServiceContext, intent: ChargeIntent, waitMs: number, hints: AdmissionHints = {}): Promise<ChargeReply> {
  const requestedAt = new Date();
  const release = await admitCharge(ctx, intent, hints);
  // The slot stays taken after the answer only for a charge this call started and left undecided.
  let undecided: ChargeHandle | null = null;
  try {
    await hints.beforeStart?.();
    const attached = await startOrAttachKnowingTheOutcome(ctx, intent);
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
    // not decided: a client following the status table must not take an unauthenticated charge as
    // final. It gives its admission place back: waiting for a person costs the worker nothing.
    if (outcome) return { charge: outcome, replayed: !started, completed: outcome.status !== 'requires_action' };
    if (started) undecided = handle;
    return { charge: await stillProcessing(ctx, intent, requestedAt), replayed: !started, completed: false };
  } finally {
    if (undecided !== null) holdUntilClosed(ctx, undecided, release);
    else release();
  }
}

/** Starts the charge (or attaches) without waiting. */
export async function startCharge(ctx: ServiceContext, intent: ChargeIntent, hints: AdmissionHints = {}): Promise<{ handle: ChargeHandle; replayed: boolean }> {
  const release = await admitCharge(ctx, intent, hints);
  let undecided: ChargeHandle | null = null;
  try {
    await hints.beforeStart?.();
    const attached = await startOrAttachKnowingTheOutcome(ctx, intent);
    if ('settled' in attached) return { handle: chargeHandle(ctx, intent.tenant, intent.idempotencyKey), replayed: true };
    if (attached.started) undecided = attached.handle;
    return { handle: attached.handle, replayed: !attached.started };
  } finally {
    if (undecided !== null) holdUntilClosed(ctx, undecided, release);
    else release();
  }
}

const nothingToRelease: ReleaseSlot = () => {};

/**
 * Decides, before anything is recorded or started, whether this request may go on: always when the
 * process has no bound or a free slot (taken: the caller gives it back), and when every slot is
 * taken, only for a key already known (a replay starts nothing new: it is answered from the ledger
 * row or by attaching to its workflow, which needs no slot). A new key then is refused at once.
 */
async function admitCharge(ctx: ServiceContext, intent: ChargeIntent, hints: AdmissionHints): Promise<ReleaseSlot> {
  const admission = ctx.admission;
  if (admission === null) return nothingToRelease;
  const startedAtMs = performance.now();
  const release = admission.tryAcquire(chargeWorkflowId(intent.tenant, intent.idempotencyKey));
  if (release !== null) {
    hints.onAdmitted?.(startedAtMs);
    return release;
  }
  const known = await keyKnown(ctx, intent, hints.ledgerKnowsKey);
  hints.onAdmitted?.(startedAtMs);
  if (known) return nothingToRelease;
  throw admission.refusal();
}

/**
 * Whether the key has a ledger row or, when the process's describe budget is above 0, a workflow
 * Temporal names within that budget. The ledger's answer is the caller's when it read it already
 * (`ledgerKnowsKey`); otherwise the ledger and Temporal are asked at once (a refusal's latency is
 * the slower of the two, not their sum). The workflow's answer counts only when the ledger has no row.
 */
async function keyKnown(ctx: ServiceContext, intent: ChargeIntent, ledgerKnowsKey: boolean | undefined): Promise<boolean> {
  if (ledgerKnowsKey === true) return true;
  const describeBudgetMs = ctx.admission?.describeBudgetMs ?? 0;
  const workflow = describeBudgetMs > 0 ? workflowNamedWithin(ctx, intent, describeBudgetMs) : Promise.resolve({ known: false });
  if (ledgerKnowsKey === undefined && (await readCharge(ctx.ledger, intent.tenant, intent.idempotencyKey)) !== null) return true;
  const answer = await workflow;
  if ('error' in answer) throw answer.error;
  return answer.known;
}

/**
 * Whether Temporal names a workflow under the key within `budgetMs`: a race, not a gRPC deadline,
 * so the budget holds however the call is slow (a connection being made counts too). A describe
 * still going when it ends is left to finish, its result unused. Settles, never rejects, so that
 * its failure is never left unobserved while the ledger is read.
 */
function workflowNamedWithin(ctx: ServiceContext, intent: ChargeIntent, budgetMs: number): Promise<{ known: boolean } | { error: unknown }> {
  const describing = chargeHandle(ctx, intent.tenant, intent.idempotencyKey)
    .describe()
    .then(
      () => true,
      (error: unknown) => (error instanceof WorkflowNotFoundError ? false : Promise.reject(error)),
    );
  let budgetTimer: NodeJS.Timeout | undefined;
  const budget = new Promise<false>((resolve) => {
    budgetTimer = setTimeout(() => resolve(false), budgetMs);
  });
  describing.catch(() => undefined);
  return Promise.race([describing, budget])
    .finally(() => clearTimeout(budgetTimer))
    .then((known) => ({ known }), (error: unknown) => ({ error }));
}

/**
 * Keeps the slot of an admitted charge whose request was answered before it was decided, until its
 * workflow closes (or the watch's bound runs out, or Temporal cannot be asked): its work is still
 * the process's to finish. Never rejects: it runs after the caller was answered.
 */
function holdUntilClosed(ctx: ServiceContext, handle: ChargeHandle, release: ReleaseSlot): void {
  const watchMs = ctx.admission?.options.releaseWatchMaxMs ?? 0;
  if (ctx.closing.aborted || watchMs <= 0) {
    release();
    return;
  }
  ctx.temporal.withAbortSignal(ctx.closing, () => waitForOutcome(ctx, handle, watchMs)).then(release, release);
}

/** How long a describe may take that asks whether a start whose answer was lost took effect. */
const startCheckTimeoutMs = 1_000;

/**
 * startOrAttachCharge, except that a start whose answer was lost (its deadline ran out, or the call
 * was cancelled, after the request may have reached Temporal) is not reported as a failure while
 * the workflow may be running: the execution is described, and when it holds this request it is
 * attached to. Only a start that did not happen (or could not be checked) is an error, so that a
 * "retry later" answer does not hide a charge that is going on.
 */
async function startOrAttachKnowingTheOutcome(ctx: ServiceContext, intent: ChargeIntent): ReturnType<typeof startOrAttachCharge> {
  try {
    return await startOrAttachCharge(ctx, intent);
  } catch (error) {
    const code = grpcCodeOf(error);
    if (code !== grpcStatus.DEADLINE_EXCEEDED && code !== grpcStatus.CANCELLED) throw error;
    const handle = chargeHandle(ctx, intent.tenant, intent.idempotencyKey);
    const description = await ctx.temporal
      .withDeadline(Date.now() + startCheckTimeoutMs, () => handle.describe())
      .catch(() => null);
    const memo = description?.memo as Partial<ChargeMemo> | undefined;
    if (memo?.fingerprint === undefined || memo.fingerprint !== intent.fingerprint) throw error;
    return { handle, started: true };
  }
}

/**
 * The answer of a charge still undecided at the end of the wait, built without asking the worker
 * (a query needs a worker's free slot, which a loaded worker has not): the ledger row once the Try
 * has written it (pending or reserved), otherwise the charge as the request describes it, pending,
 * as the workflow itself begins it.
 */
async function stillProcessing(ctx: ServiceContext, intent: ChargeIntent, requestedAt: Date): Promise<Charge> {
  const row = await readCharge(ctx.ledger, intent.tenant, intent.idempotencyKey);
  return row !== null ? row.charge : pendingCharge(intent, requestedAt);
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
