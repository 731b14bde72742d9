import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  isGrpcDeadlineError,
  type Client,
  type WorkflowHandle,
} from '@temporalio/client';
import { createHash } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import type { Charge, ChargeIntent, ChargeRequest, ChargeStatus } from '../domain/charge.js';
import { chargeWorkflowId, decidedStatuses } from '../domain/charge.js';
import { refundWorkflowId, type Refund, type RefundIntent } from '../domain/refund.js';
import { cancelReasons, chargeStateRefusals, incurableLedgerFaults, ledgerRefusals, refundRefusals } from '../domain/refusals.js';
import { getAccounts } from '../ledger/accounts.js';
import { readCharge, type LedgerCharge } from '../ledger/charges.js';
import { listCharges, type ChargePage } from '../ledger/listing.js';
import type { LedgerPool } from '../ledger/pool.js';
import { listRefunds, readRefund } from '../ledger/refunds.js';
import {
  cancelChargeUpdate,
  captureChargeUpdate,
  chargeStatusQuery,
  chargeTaskQueue,
  refundStatusQuery,
  refundWorkflowType,
  releaseHoldWorkflowId,
  releaseHoldWorkflowType,
  type ChargeMemo,
  type ChargePolicy,
  type ChargeWorkflowInput,
  type RefundMemo,
  type RefundWorkflowInput,
  type ReleaseHoldInput,
} from '../../workflows/definitions.js';
import type { ChargeWorkflow } from '../../workflows/charge-workflow.js';
import type { RefundWorkflow } from '../../workflows/refund-workflow.js';
import type { ReleaseHoldWorkflow } from '../../workflows/hold-sweeper.js';
import {
  ChargeStateConflictError,
  IdempotencyConflictError,
  NotFoundError,
  UnavailableError,
  ValidationError,
  type FieldError,
} from './errors.js';
import { chargeFingerprint, chargeIdFor, fingerprintLike, refundFingerprint } from './intent.js';
import { asUnavailable, grpcCodeOf, grpcStatus } from './unavailable.js';
import {
  assertIdempotencyKey,
  assertTenant,
  parseAmountBody,
  parseChargeRequest,
  parseOptionalAmount,
  validateChargeListQuery,
} from './validation.js';

export interface ChargeServiceOptions {
  temporal: Client;
  ledger: LedgerPool;
  policy: ChargePolicy;
  amountMinorMax: number;
  /** How long `charge` waits for the outcome by default before answering "still processing". */
  waitBudgetMs: number;
  /**
   * Bound on starting (or attaching to) a charge. Without it an unreachable Temporal is retried by
   * the gRPC client for about 20 s before the caller hears "unavailable"; with it, after this long.
   * Safe to cut short: a retry with the same key attaches to whatever the cut call started.
   */
  startTimeoutMs?: number;
  taskQueue?: string;
  /**
   * Ask the server to hand a new charge's first workflow task straight back to a worker in this
   * process (eager workflow start), saving the task's trip through the task queue. Only valid when
   * `temporal` is a Client on the worker's own NativeConnection; the server falls back to the queue
   * when that worker has no free slot.
   */
  eagerWorkflowStart?: boolean;
}

const defaultStartTimeoutMs = 5_000;

/** What a charge call answers: the charge, whether this call replayed an earlier one, and whether it is decided. */
export interface ChargeReply {
  charge: Charge;
  /** True when the key was already known: this call started nothing. */
  replayed: boolean;
  /** False when the wait budget ran out first; the charge goes on and the same call later returns it. */
  completed: boolean;
}

type ChargeHandle = WorkflowHandle<typeof ChargeWorkflow>;
type RefundHandle = WorkflowHandle<typeof RefundWorkflow>;

/** What a refund call answers, as ChargeReply does for a charge. */
export interface RefundReply {
  refund: Refund;
  /** True when the refund key was already known: this call started nothing. */
  replayed: boolean;
  /** False when the wait budget ran out first; the refund goes on and the same call later returns it. */
  completed: boolean;
}

/** Filters for finding charges; every one optional, newest first. */
export interface ChargeListQuery {
  orderId?: string;
  payerAccountId?: string;
  status?: ChargeStatus;
  /** 1 to 100; 20 when omitted. */
  limit?: number;
  /** Idempotency key of the last charge of the previous page. */
  startingAfter?: string;
}

/**
 * The ledger refused the refund (more than is left to refund, or a payee that cannot pay it back).
 * A decision, recorded: the same refund key gets this answer forever. Surfaces map it as the 409
 * it extends; `refund` is the failed refund as the ledger recorded it.
 */
export class RefundRefusedError extends ChargeStateConflictError {
  constructor(readonly refund: Refund) {
    const failure = refundRefusals[refund.failureCode ?? 'exceeds_refundable'];
    super(
      failure.type,
      `refund ${refund.refundKey} of ${refund.amountMinor} on charge ${refund.chargeKey} was refused: ${failure.hint}`,
    );
  }
}

/**
 * The one module that owns the idempotency rules. Every surface (HTTP API, MCP server, CLI, the
 * TypeScript API) calls it, and none decides on its own whether a request is new, a replay or a
 * conflict.
 */
export class ChargeService {
  private readonly taskQueue: string;

  constructor(private readonly options: ChargeServiceOptions) {
    this.taskQueue = options.taskQueue ?? chargeTaskQueue;
  }

  /** Start the charge or attach to the one already started under this key, and wait for its outcome. */
  async charge(tenant: string, idempotencyKey: string, body: unknown, options: { waitMs?: number } = {}): Promise<ChargeReply> {
    return this.translate(async () => {
      const attached = await this.options.temporal.withDeadline(
        Date.now() + (this.options.startTimeoutMs ?? defaultStartTimeoutMs),
        () => this.startOrAttach(tenant, idempotencyKey, body),
      );
      if ('settled' in attached) return { charge: attached.settled, replayed: true, completed: true };
      const { handle, started } = attached;
      const waitMs = Math.min(options.waitMs ?? this.options.waitBudgetMs, this.options.waitBudgetMs);
      const manual = this.buildIntent(tenant, idempotencyKey, body).request.captureMode === 'manual';
      const outcome = manual
        ? await this.waitForReservation(tenant, idempotencyKey, handle, waitMs)
        : await this.waitForOutcome(handle, waitMs);
      if (outcome) return { charge: outcome, replayed: !started, completed: true };
      return { charge: await this.liveCharge(handle), replayed: !started, completed: false };
    });
  }

  /** Start the charge (or attach) without waiting: for callers that poll or that hold the handle. */
  async startCharge(tenant: string, idempotencyKey: string, body: unknown): Promise<{ handle: ChargeHandle; replayed: boolean }> {
    return this.translate(async () => {
      const attached = await this.options.temporal.withDeadline(
        Date.now() + (this.options.startTimeoutMs ?? defaultStartTimeoutMs),
        () => this.startOrAttach(tenant, idempotencyKey, body),
      );
      if ('settled' in attached) return { handle: this.handleFor(tenant, idempotencyKey), replayed: true };
      return { handle: attached.handle, replayed: !attached.started };
    });
  }

  /** The charge as it stands now: the ledger once decided (refunds included), the workflow while open. */
  async getCharge(tenant: string, idempotencyKey: string): Promise<Charge> {
    return this.translate(async () => {
      assertTenant(tenant);
      assertIdempotencyKey(idempotencyKey);
      const row = await readCharge(this.options.ledger, tenant, idempotencyKey);
      if (row && decidedStatuses.has(row.charge.status)) return row.charge;
      try {
        const handle = this.handleFor(tenant, idempotencyKey);
        const description = await handle.describe();
        if (description.status.name === 'RUNNING') return await handle.query(chargeStatusQuery);
        const settled = await readCharge(this.options.ledger, tenant, idempotencyKey);
        if (settled) return orphanedOrAsIs(settled);
        return await handle.result(); // closed without a ledger row: its result is all there is
      } catch (error) {
        if (error instanceof WorkflowNotFoundError) {
          if (row) return orphanedOrAsIs(row);
          throw new NotFoundError(`no charge with idempotency key ${idempotencyKey}`);
        }
        throw error;
      }
    });
  }

  /** Cancel an open charge. A repeated cancel returns the cancelled charge; a cancel after success is refused. */
  async cancelCharge(tenant: string, idempotencyKey: string): Promise<Charge> {
    const judge = (charge: Charge): Charge => {
      if (charge.status === 'cancelled') return charge;
      if (charge.status === 'declined') throw refusal('declined', `charge ${idempotencyKey} was declined`);
      throw refusal('alreadySucceeded', `charge ${idempotencyKey} already succeeded`);
    };
    return this.translate(() =>
      this.updateOrJudge(
        tenant,
        idempotencyKey,
        (handle) => handle.executeUpdate(cancelChargeUpdate),
        judge,
        // The hold's workflow closed without settling it. The caller asks for exactly what must
        // happen anyway, so it is done now, as a void of a card authorisation is, rather than
        // refused while the sweeper gets round to it: a release workflow runs the ledger's
        // idempotent Cancel (racing the sweeper is harmless: the first Cancel wins, both answer it).
        async () => {
          const input: ReleaseHoldInput = {
            tenant,
            idempotencyKey,
            reason: cancelReasons.requestedByCaller,
            activityStartToCloseMs: this.options.policy.activityStartToCloseMs,
          };
          const release = await this.options.temporal.workflow.start<typeof ReleaseHoldWorkflow>(releaseHoldWorkflowType, {
            taskQueue: this.taskQueue,
            workflowId: releaseHoldWorkflowId(tenant, idempotencyKey),
            args: [input],
            workflowIdReusePolicy: 'ALLOW_DUPLICATE',
            workflowIdConflictPolicy: 'USE_EXISTING',
          });
          const released = await this.waitForOutcome(release, this.options.waitBudgetMs);
          if (!released) {
            // The release goes on; the same cancel later answers the cancelled charge.
            throw new UnavailableError('database', `the hold of charge ${idempotencyKey} is still being released; retry the cancel`);
          }
          return judge(released);
        },
      ),
    );
  }

  /** Capture a manual-capture charge, all of it or `amountMinor` of it (the rest is released). */
  async captureCharge(tenant: string, idempotencyKey: string, amountMinor: number | null = null): Promise<Charge> {
    const amount = parseOptionalAmount(amountMinor, 'amount', this.options.amountMinorMax);
    return this.translate(() =>
      this.updateOrJudge(
        tenant,
        idempotencyKey,
        (handle) => handle.executeUpdate(captureChargeUpdate, { args: [{ amountMinor: amount }] }),
        (charge) => {
          if (charge.captureMode !== 'manual') {
            throw refusal('notManualCapture', `charge ${idempotencyKey} is captured automatically`);
          }
          if (charge.status === 'cancelled') {
            const why = charge.failureReason === 'hold_expired' ? 'its hold expired' : 'it was cancelled';
            throw refusal('alreadyCancelled', `charge ${idempotencyKey} cannot be captured: ${why}`);
          }
          if (charge.status === 'declined') throw refusal('declined', `charge ${idempotencyKey} was declined`);
          if (amount !== null && amount !== charge.amountCapturedMinor) {
            throw refusal('captureAmountConflict', `charge ${idempotencyKey} was captured for ${charge.amountCapturedMinor}`);
          }
          return charge;
        },
        // Nothing may capture a hold whose workflow is gone: that workflow was the one place that
        // decides between capture and void, and it may have been stopped on purpose.
        (held) => {
          if (held.captureMode !== 'manual') {
            throw refusal('notManualCapture', `charge ${idempotencyKey} is captured automatically`);
          }
          throw refusal(
            'holdOrphaned',
            `charge ${idempotencyKey} cannot be captured: its workflow ended without settling the hold`,
          );
        },
      ),
    );
  }

  /**
   * Refund a captured charge, all that is left of it (`{}`) or `{amount}` of it, exactly once per
   * refund key. A repeated request returns the first result; the same refund key with another
   * amount is an IdempotencyConflictError; a refused refund is a RefundRefusedError, every time.
   */
  async refund(
    tenant: string,
    chargeKey: string,
    refundKey: string,
    body: unknown,
    options: { waitMs?: number } = {},
  ): Promise<RefundReply> {
    return this.translate(async () => {
      const intent = this.buildRefundIntent(tenant, chargeKey, refundKey, body);
      const charge = await readCharge(this.options.ledger, tenant, chargeKey);
      // Refused before anything starts: a captured charge stays captured, so a replay of an
      // accepted refund key always passes these checks again.
      if (!charge) throw new NotFoundError(`no charge with idempotency key ${chargeKey}`);
      if (charge.holdState !== 'CONFIRMED') {
        throw refusal('notCaptured', `charge ${chargeKey} is ${charge.charge.status}`);
      }
      const attached = await this.startOrAttachRefund(intent, charge);
      if ('settled' in attached) return { refund: refusedOrSucceeded(attached.settled), replayed: true, completed: true };
      const { handle, started } = attached;
      const waitMs = Math.min(options.waitMs ?? this.options.waitBudgetMs, this.options.waitBudgetMs);
      const outcome = await this.waitForOutcome(handle, waitMs);
      if (outcome) return { refund: refusedOrSucceeded(outcome), replayed: !started, completed: true };
      return { refund: await handle.query(refundStatusQuery), replayed: !started, completed: false };
    });
  }

  /** One refund as it stands: the ledger's decision, or pending while its workflow runs. */
  async getRefund(tenant: string, chargeKey: string, refundKey: string): Promise<Refund> {
    return this.translate(async () => {
      assertTenant(tenant);
      assertIdempotencyKey(chargeKey, 'charge_key');
      assertIdempotencyKey(refundKey, 'refund_key');
      const row = await readRefund(this.options.ledger, tenant, chargeKey, refundKey);
      if (row) return row.refund;
      const handle = this.refundHandleFor(tenant, chargeKey, refundKey);
      try {
        const description = await handle.describe();
        if (description.status.name === 'RUNNING') return await handle.query(refundStatusQuery);
        const settled = await readRefund(this.options.ledger, tenant, chargeKey, refundKey);
        if (settled) return settled.refund;
        return await handle.result(); // closed without a ledger row: its failure is all there is
      } catch (error) {
        if (error instanceof WorkflowNotFoundError) throw new NotFoundError(`no refund ${refundKey} of charge ${chargeKey}`);
        throw error;
      }
    });
  }

  /** Every refund of one charge, refused ones included, oldest first. */
  async listRefunds(tenant: string, chargeKey: string): Promise<Refund[]> {
    return this.translate(async () => {
      assertTenant(tenant);
      assertIdempotencyKey(chargeKey, 'charge_key');
      if (!(await readCharge(this.options.ledger, tenant, chargeKey))) {
        throw new NotFoundError(`no charge with idempotency key ${chargeKey}`);
      }
      return listRefunds(this.options.ledger, tenant, chargeKey);
    });
  }

  /**
   * Charges by order id, payer account and status, newest first, from the ledger (which keeps
   * every key forever; Temporal's visibility forgets closed workflows after the retention period).
   */
  async listCharges(tenant: string, query: ChargeListQuery = {}): Promise<ChargePage> {
    return this.translate(async () => {
      assertTenant(tenant);
      const valid = validateChargeListQuery(query);
      return listCharges(this.options.ledger, tenant, {
        orderId: valid.orderId ?? null,
        payerAccountId: valid.payerAccountId ?? null,
        status: valid.status ?? null,
        limit: valid.limit,
        startingAfter: valid.startingAfter ?? null,
      });
    });
  }

  /** Validates a refund request and builds its intent: the same (tenant, keys, body) always gives the same intent. */
  buildRefundIntent(tenant: string, chargeKey: string, refundKey: string, body: unknown): RefundIntent {
    assertTenant(tenant);
    assertIdempotencyKey(chargeKey, 'charge_key');
    assertIdempotencyKey(refundKey, 'idempotency_key');
    const amountMinor = parseRefundBody(body, this.options.amountMinorMax);
    return {
      tenant,
      chargeKey,
      refundKey,
      refundId: `re_${sha256Hex(`${tenant}\n${chargeKey}\n${refundKey}`).slice(0, 24)}`,
      fingerprint: refundFingerprint(amountMinor),
      amountMinor,
    };
  }

  /** Validates the request and builds the intent: the same (tenant, key, body) always gives the same intent. */
  buildIntent(tenant: string, idempotencyKey: string, body: unknown): ChargeIntent {
    assertTenant(tenant);
    assertIdempotencyKey(idempotencyKey);
    const request = parseChargeRequest(body, this.options.amountMinorMax);
    return {
      tenant,
      idempotencyKey,
      chargeId: chargeIdFor(tenant, idempotencyKey),
      fingerprint: chargeFingerprint(request),
      request,
    };
  }

  private async startOrAttach(
    tenant: string,
    idempotencyKey: string,
    body: unknown,
  ): Promise<{ handle: ChargeHandle; started: boolean } | { settled: Charge }> {
    const built = this.buildIntent(tenant, idempotencyKey, body);
    // Both reads at once: a new charge needs the accounts checked, a replay needs only the row.
    const [recorded] = await Promise.all([
      readCharge(this.options.ledger, tenant, idempotencyKey),
      this.assertAccountsUsable(tenant, built.request),
    ]);
    // A key recorded under an earlier fingerprint definition is compared under that definition,
    // and the intent carries that fingerprint so the ledger's own comparison in Try agrees.
    const like = (first: string | undefined): string => fingerprintLike(first, (version) => chargeFingerprint(built.request, version));
    const intent: ChargeIntent = recorded === null ? built : { ...built, fingerprint: like(recorded.fingerprint) };
    if (recorded !== null) {
      // The ledger's row is the first request's, forever: a different request is a conflict, and a
      // decided charge is answered from the row without a Temporal call (a few ms instead of the
      // round trips of start, describe and result). Once refunds touched the row it no longer is
      // the original answer, so those replays still ask the workflow for its result.
      if (recorded.fingerprint !== intent.fingerprint) throw conflict(idempotencyKey);
      if (decidedStatuses.has(recorded.charge.status) && recorded.charge.amountRefundedMinor === 0) {
        return { settled: recorded.charge };
      }
    }
    const workflowId = chargeWorkflowId(tenant, idempotencyKey);
    const memo: ChargeMemo = { fingerprint: intent.fingerprint };
    const input: ChargeWorkflowInput = { intent, policy: this.options.policy };
    try {
      const handle = await this.options.temporal.workflow.start<typeof ChargeWorkflow>('ChargeWorkflow', {
        taskQueue: this.taskQueue,
        workflowId,
        args: [input],
        memo: { ...memo },
        workflowIdReusePolicy: 'REJECT_DUPLICATE',
        workflowIdConflictPolicy: 'FAIL',
        ...(this.options.eagerWorkflowStart ? { requestEagerStart: true } : {}),
      });
      return { handle, started: true };
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
    }
    // Temporal refused a second start: attach to the first one, if it is the same request.
    const handle = this.handleFor(tenant, idempotencyKey);
    const description = await handle.describe();
    const firstFingerprint = (description.memo as Partial<ChargeMemo> | undefined)?.fingerprint;
    if (firstFingerprint !== undefined && firstFingerprint === like(firstFingerprint)) return { handle, started: false };
    // The ledger outranks the memo: after Temporal forgot a key, a mismatched request may have
    // started (and failed) an execution whose memo is wrong, while the ledger keeps the original.
    const row = await readCharge(this.options.ledger, tenant, idempotencyKey);
    if (row && row.fingerprint === like(row.fingerprint) && decidedStatuses.has(row.charge.status)) {
      return { settled: row.charge };
    }
    throw conflict(idempotencyKey);
  }

  /**
   * Unknown accounts and currency mismatches are refused before anything is recorded. The ledger's
   * Try checks again (and declines), should an account change in between.
   */
  private async assertAccountsUsable(tenant: string, request: ChargeRequest): Promise<void> {
    const accounts = await getAccounts(this.options.ledger, tenant, [request.payerAccountId, request.payeeAccountId]);
    const errors: FieldError[] = [];
    for (const [field, id] of [
      ['payer_account_id', request.payerAccountId],
      ['payee_account_id', request.payeeAccountId],
    ] as const) {
      const account = accounts.get(id);
      if (!account) errors.push({ field, message: `no account ${id} for this tenant` });
      else if (account.currency !== request.currency) {
        errors.push({ field: 'currency', message: `account ${id} holds ${account.currency}, not ${request.currency}` });
      }
    }
    if (errors.length > 0) throw new ValidationError(errors);
  }

  /**
   * Waits at most `waitMs` for the workflow's result. The wait is a gRPC deadline on the long poll,
   * so nothing keeps polling after the caller has been answered.
   */
  private async waitForOutcome<T>(handle: { result(): Promise<T> }, waitMs: number): Promise<T | null> {
    if (waitMs <= 0) return null;
    try {
      return await this.options.temporal.withDeadline(Date.now() + waitMs, () => handle.result());
    } catch (error) {
      if (isGrpcDeadlineError(error) || isGrpcDeadlineError((error as Error).cause)) return null;
      throw error;
    }
  }

  /**
   * A manual-capture charge stays open until it is captured, so its create is answered by the
   * reservation (or the decline), as a card authorisation is. The ledger row is polled rather than
   * the workflow queried, so callers waiting here cost the worker nothing; once the workflow has
   * closed, its result is the answer, as for automatic capture.
   */
  private async waitForReservation(tenant: string, idempotencyKey: string, handle: ChargeHandle, waitMs: number): Promise<Charge | null> {
    if (waitMs <= 0) return null;
    const abort = new AbortController();
    // Settles, never rejects: the workflow can fail (terminated, say) while this loop is busy reading
    // the ledger, and a rejection nobody is awaiting at that moment would take the process down.
    const closed: Promise<{ charge: Charge | null } | { error: unknown }> = this.options.temporal
      .withAbortSignal(abort.signal, () => this.waitForOutcome(handle, waitMs))
      .then(
        (charge) => ({ charge }),
        (error: unknown) => (abort.signal.aborted ? { charge: null } : { error }),
      );
    try {
      for (let pollMs = 20; ; pollMs = Math.min(pollMs * 2, 200)) {
        const row = await readCharge(this.options.ledger, tenant, idempotencyKey);
        if (row?.charge.status === 'reserved') return row.charge;
        const first = await Promise.race([closed, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), pollMs))]);
        if (first === undefined) continue;
        if ('error' in first) throw first.error;
        return first.charge; // the workflow closed, or the wait budget ran out (null)
      }
    } finally {
      abort.abort();
    }
  }

  /** As startOrAttach, for refunds: Temporal rejects the second start, the memo or the ledger judges the request. */
  private async startOrAttachRefund(
    built: RefundIntent,
    charge: LedgerCharge,
  ): Promise<{ handle: RefundHandle; started: boolean } | { settled: Refund }> {
    const { tenant, chargeKey, refundKey } = built;
    // The ledger's row is the first request's, forever, and may carry a fingerprint of an earlier
    // definition: the request is compared under that one, and the intent carries it, so that the
    // ledger's own comparison agrees should Temporal have forgotten the refund's workflow.
    const recorded = await readRefund(this.options.ledger, tenant, chargeKey, refundKey);
    const like = (first: string | undefined): string => fingerprintLike(first, (version) => refundFingerprint(built.amountMinor, version));
    const intent: RefundIntent = recorded === null ? built : { ...built, fingerprint: like(recorded.fingerprint) };
    if (recorded !== null) {
      if (recorded.fingerprint !== intent.fingerprint) throw refundConflict(chargeKey, refundKey);
      return { settled: recorded.refund };
    }
    const memo: RefundMemo = { fingerprint: intent.fingerprint };
    const input: RefundWorkflowInput = {
      intent,
      pending: pendingRefund(intent, charge, new Date()),
      policy: { activityStartToCloseMs: this.options.policy.activityStartToCloseMs },
    };
    try {
      const handle = await this.options.temporal.workflow.start<typeof RefundWorkflow>(refundWorkflowType, {
        taskQueue: this.taskQueue,
        workflowId: refundWorkflowId(tenant, chargeKey, refundKey),
        args: [input],
        memo: { ...memo },
        workflowIdReusePolicy: 'REJECT_DUPLICATE',
        workflowIdConflictPolicy: 'FAIL',
      });
      return { handle, started: true };
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
    }
    const handle = this.refundHandleFor(tenant, chargeKey, refundKey);
    const description = await handle.describe();
    const firstFingerprint = (description.memo as Partial<RefundMemo> | undefined)?.fingerprint;
    if (firstFingerprint !== undefined && firstFingerprint === like(firstFingerprint)) return { handle, started: false };
    const row = await readRefund(this.options.ledger, tenant, chargeKey, refundKey);
    if (row && row.fingerprint === like(row.fingerprint)) return { settled: row.refund };
    throw refundConflict(chargeKey, refundKey);
  }

  private refundHandleFor(tenant: string, chargeKey: string, refundKey: string): RefundHandle {
    return this.options.temporal.workflow.getHandle<typeof RefundWorkflow>(refundWorkflowId(tenant, chargeKey, refundKey));
  }

  private async liveCharge(handle: ChargeHandle): Promise<Charge> {
    return handle.query(chargeStatusQuery);
  }

  private handleFor(tenant: string, idempotencyKey: string): ChargeHandle {
    return this.options.temporal.workflow.getHandle<typeof ChargeWorkflow>(chargeWorkflowId(tenant, idempotencyKey));
  }

  /**
   * Sends an update to a running charge; once the workflow is closed (or forgotten), the ledger row
   * is the answer and `judge` decides whether it satisfies the request. Unknown keys start nothing.
   */
  private async updateOrJudge(
    tenant: string,
    idempotencyKey: string,
    update: (handle: ChargeHandle) => Promise<Charge>,
    judge: (charge: Charge) => Charge,
    orphaned: (held: Charge) => Promise<Charge> | Charge,
  ): Promise<Charge> {
    assertTenant(tenant);
    assertIdempotencyKey(idempotencyKey);
    const handle = this.handleFor(tenant, idempotencyKey);
    let closed = false;
    try {
      const description = await handle.describe();
      if (description.status.name === 'RUNNING') return await update(handle);
      closed = true;
    } catch (error) {
      // An update accepted just as the workflow closed is answered by the ledger, not refused.
      const completedMeanwhile = error instanceof WorkflowNotFoundError || isCompletedDuringUpdate(error);
      if (!completedMeanwhile && error instanceof WorkflowUpdateFailedError) throw stateConflictFrom(error.cause) ?? error;
      if (!completedMeanwhile) throw error;
      closed = !(error instanceof WorkflowNotFoundError);
    }
    const row = await readCharge(this.options.ledger, tenant, idempotencyKey);
    // Still held after its workflow closed (terminated, reset) or was forgotten: no workflow will
    // settle it, so neither "already succeeded" nor "reserved" would be true.
    if (row?.holdState === 'TRIED') return orphaned(orphanedOrAsIs(row));
    if (row) return judge(row.charge);
    // Decided without a ledger row (values the ledger rejects): the workflow's result is the record.
    if (closed) return judge(await handle.result());
    throw new NotFoundError(`no charge with idempotency key ${idempotencyKey}`);
  }

  /** Runs an operation and turns infrastructure and workflow failures into the client's typed errors. */
  private async translate<T>(operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      if (error instanceof WorkflowFailedError) {
        const refusal = applicationFailureIn(error);
        if (refusal?.type === ledgerRefusals.idempotencyConflict.type) throw new IdempotencyConflictError(refusal.message);
        if (refusal?.type === ledgerRefusals.chargeNotFound.type) throw new NotFoundError(refusal.message);
        if (refusal?.type === ledgerRefusals.chargeNotCaptured.type) {
          throw new ChargeStateConflictError(refusal.type, refusal.message);
        }
        // Values the ledger cannot store (validation should have caught them first): the caller's
        // request is at fault, and retrying it can never succeed.
        if (refusal && refusal.type === incurableLedgerFaults.dataRejected.type) {
          throw new ValidationError([{ field: 'body', message: `the ledger rejected these values: ${refusal.message}` }]);
        }
      }
      throw asUnavailable(error);
    }
  }
}

/** The business failure at the root of a workflow or activity failure chain, if any. */
function applicationFailureIn(error: unknown): ApplicationFailure | null {
  for (let cause: unknown = error; cause instanceof Error; cause = cause.cause) {
    if (cause instanceof ApplicationFailure) return cause;
  }
  return null;
}

function refundConflict(chargeKey: string, refundKey: string): IdempotencyConflictError {
  return new IdempotencyConflictError(
    `refund key ${refundKey} was already used for a different refund of charge ${chargeKey}; ` +
      'use a new refund key for a new refund, or resend the original request unchanged',
  );
}

function conflict(idempotencyKey: string): IdempotencyConflictError {
  return new IdempotencyConflictError(
    `idempotency key ${idempotencyKey} was already used for a different charge request; ` +
      'use a new key for a new charge, or resend the original request unchanged',
  );
}

/**
 * A row read after its ChargeWorkflow was found closed or forgotten. Still TRIED means nothing will
 * capture it: the money is still held (so the status stays reserved, as the balances say), and
 * failure_reason says it is being released (by the sweeper, or at once by a cancel).
 */
function orphanedOrAsIs(row: LedgerCharge): Charge {
  return row.holdState === 'TRIED' ? { ...row.charge, failureReason: cancelReasons.holdOrphaned } : row.charge;
}

function refusal(name: keyof typeof chargeStateRefusals, detail: string): ChargeStateConflictError {
  const r = chargeStateRefusals[name];
  return new ChargeStateConflictError(r.type, `${detail}: ${r.hint}`);
}

function stateConflictFrom(cause: unknown): ChargeStateConflictError | null {
  if (cause instanceof ApplicationFailure && cause.type) return new ChargeStateConflictError(cause.type, cause.message);
  return null;
}

/**
 * An update that reached the workflow just as it closed: the ledger has the answer. Temporal says so
 * with NOT_FOUND ("workflow execution already completed", "update aborted by closing workflow") for
 * an update not yet accepted, and with an AcceptedUpdateCompletedWorkflow failure for one accepted.
 */
function isCompletedDuringUpdate(error: unknown): boolean {
  if (grpcCodeOf(error) === grpcStatus.NOT_FOUND) return true;
  return error instanceof WorkflowUpdateFailedError && applicationFailureIn(error.cause)?.type === 'AcceptedUpdateCompletedWorkflow';
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** The refund body on the wire: `{}` (refund all that is left) or `{amount}`; `"amount": null` is an error. */
function parseRefundBody(body: unknown, amountMinorMax: number): number | null {
  return parseAmountBody(body, amountMinorMax, 'all that is left to refund');
}

/** A refused refund is an error for the caller, the same one on every replay. */
function refusedOrSucceeded(refund: Refund): Refund {
  if (refund.status === 'failed') throw new RefundRefusedError(refund);
  return refund;
}

/** The refund before the ledger has answered: what was asked, on which charge. */
function pendingRefund(intent: RefundIntent, charge: LedgerCharge, at: Date): Refund {
  return {
    id: intent.refundId,
    tenant: intent.tenant,
    chargeKey: intent.chargeKey,
    chargeId: charge.charge.id,
    refundKey: intent.refundKey,
    amountMinor: intent.amountMinor,
    requestedAmountMinor: intent.amountMinor,
    currency: charge.charge.currency,
    status: 'pending',
    failureCode: null,
    createdAt: at.toISOString(),
  };
}
