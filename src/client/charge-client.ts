import {
  WorkflowExecutionAlreadyStartedError,
  WorkflowFailedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  isGrpcDeadlineError,
  type Client,
  type WorkflowHandle,
} from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import type { Charge, ChargeIntent, ChargeRequest } from '../domain/charge.js';
import { chargeWorkflowId, decidedStatuses } from '../domain/charge.js';
import { chargeStateRefusals, ledgerRefusals } from '../domain/refusals.js';
import { getAccounts } from '../ledger/accounts.js';
import { readCharge } from '../ledger/charges.js';
import type { LedgerPool } from '../ledger/pool.js';
import {
  cancelChargeUpdate,
  captureChargeUpdate,
  chargeStatusQuery,
  chargeTaskQueue,
  type ChargeMemo,
  type ChargePolicy,
  type ChargeWorkflowInput,
} from '../../workflows/definitions.js';
import type { ChargeWorkflow } from '../../workflows/charge-workflow.js';
import {
  ChargeStateConflictError,
  IdempotencyConflictError,
  NotFoundError,
  ValidationError,
  type FieldError,
} from './errors.js';
import { chargeFingerprint, chargeIdFor } from './fingerprint.js';
import { asUnavailable } from './unavailable.js';
import { assertIdempotencyKey, assertTenant, parseChargeRequest, parseOptionalAmount } from './validation.js';

export interface ChargeClientOptions {
  temporal: Client;
  ledger: LedgerPool;
  policy: ChargePolicy;
  amountMinorMax: number;
  /** How long `charge` waits for the outcome by default before answering "still processing". */
  waitBudgetMs: number;
  taskQueue?: string;
}

/** What a charge call answers: the charge, whether this call replayed an earlier one, and whether it is decided. */
export interface ChargeReply {
  charge: Charge;
  /** True when the key was already known: this call started nothing. */
  replayed: boolean;
  /** False when the wait budget ran out first; the charge goes on and the same call later returns it. */
  completed: boolean;
}

type ChargeHandle = WorkflowHandle<typeof ChargeWorkflow>;

/**
 * The one module that owns the idempotency rules. Every surface (HTTP API, MCP server, CLI, the
 * TypeScript API) calls it, and none decides on its own whether a request is new, a replay or a
 * conflict.
 */
export class ChargeClient {
  private readonly taskQueue: string;

  constructor(private readonly options: ChargeClientOptions) {
    this.taskQueue = options.taskQueue ?? chargeTaskQueue;
  }

  /** Start the charge or attach to the one already started under this key, and wait for its outcome. */
  async charge(tenant: string, idempotencyKey: string, body: unknown, options: { waitMs?: number } = {}): Promise<ChargeReply> {
    return this.translate(async () => {
      const attached = await this.startOrAttach(tenant, idempotencyKey, body);
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
      const attached = await this.startOrAttach(tenant, idempotencyKey, body);
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
        if (settled) return settled.charge;
        return await handle.result(); // closed without a ledger row: its result is all there is
      } catch (error) {
        if (error instanceof WorkflowNotFoundError) {
          if (row) return row.charge;
          throw new NotFoundError(`no charge with idempotency key ${idempotencyKey}`);
        }
        throw error;
      }
    });
  }

  /** Cancel an open charge. A repeated cancel returns the cancelled charge; a cancel after success is refused. */
  async cancelCharge(tenant: string, idempotencyKey: string): Promise<Charge> {
    return this.translate(() =>
      this.updateOrJudge(tenant, idempotencyKey, (handle) => handle.executeUpdate(cancelChargeUpdate), (charge) => {
        if (charge.status === 'cancelled') return charge;
        if (charge.status === 'declined') throw refusal('declined', `charge ${idempotencyKey} was declined`);
        throw refusal('alreadySucceeded', `charge ${idempotencyKey} already succeeded`);
      }),
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
      ),
    );
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
    const intent = this.buildIntent(tenant, idempotencyKey, body);
    await this.assertAccountsUsable(tenant, intent.request);
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
      });
      return { handle, started: true };
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
    }
    // Temporal refused a second start: attach to the first one, if it is the same request.
    const handle = this.handleFor(tenant, idempotencyKey);
    const description = await handle.describe();
    const firstFingerprint = (description.memo as Partial<ChargeMemo> | undefined)?.fingerprint;
    if (firstFingerprint === intent.fingerprint) return { handle, started: false };
    // The ledger outranks the memo: after Temporal forgot a key, a mismatched request may have
    // started (and failed) an execution whose memo is wrong, while the ledger keeps the original.
    const row = await readCharge(this.options.ledger, tenant, idempotencyKey);
    if (row && row.fingerprint === intent.fingerprint && decidedStatuses.has(row.charge.status)) {
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
  private async waitForOutcome(handle: ChargeHandle, waitMs: number): Promise<Charge | null> {
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
    const closed = this.options.temporal
      .withAbortSignal(abort.signal, () => this.waitForOutcome(handle, waitMs))
      .catch((error: unknown) => {
        if (abort.signal.aborted) return null;
        throw error;
      });
    try {
      for (let pollMs = 20; ; pollMs = Math.min(pollMs * 2, 200)) {
        const row = await readCharge(this.options.ledger, tenant, idempotencyKey);
        if (row?.charge.status === 'reserved') return row.charge;
        const first = await Promise.race([closed, new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), pollMs))]);
        if (first !== undefined) return first; // the workflow closed, or the wait budget ran out (null)
      }
    } finally {
      abort.abort();
    }
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
  ): Promise<Charge> {
    assertTenant(tenant);
    assertIdempotencyKey(idempotencyKey);
    const handle = this.handleFor(tenant, idempotencyKey);
    try {
      const description = await handle.describe();
      if (description.status.name === 'RUNNING') return await update(handle);
    } catch (error) {
      if (error instanceof WorkflowUpdateFailedError) throw stateConflictFrom(error.cause) ?? error;
      if (!(error instanceof WorkflowNotFoundError) && !isCompletedDuringUpdate(error)) throw error;
    }
    const row = await readCharge(this.options.ledger, tenant, idempotencyKey);
    if (!row) throw new NotFoundError(`no charge with idempotency key ${idempotencyKey}`);
    return judge(row.charge);
  }

  /** Runs an operation and turns infrastructure and workflow failures into the client's typed errors. */
  private async translate<T>(operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      if (error instanceof WorkflowFailedError) {
        const refusal = applicationFailureIn(error);
        if (refusal?.type === ledgerRefusals.idempotencyConflict.type) throw new IdempotencyConflictError(refusal.message);
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

function conflict(idempotencyKey: string): IdempotencyConflictError {
  return new IdempotencyConflictError(
    `idempotency key ${idempotencyKey} was already used for a different charge request; ` +
      'use a new key for a new charge, or resend the original request unchanged',
  );
}

function refusal(name: keyof typeof chargeStateRefusals, detail: string): ChargeStateConflictError {
  const r = chargeStateRefusals[name];
  return new ChargeStateConflictError(r.type, `${detail}: ${r.hint}`);
}

function stateConflictFrom(cause: unknown): ChargeStateConflictError | null {
  if (cause instanceof ApplicationFailure && cause.type) return new ChargeStateConflictError(cause.type, cause.message);
  return null;
}

/** An update that reached the workflow just as it closed: the ledger has the answer. */
function isCompletedDuringUpdate(error: unknown): boolean {
  return /workflow execution already completed/i.test((error as Error | null)?.message ?? '');
}
