import type { Client } from '@temporalio/client';
import type { Charge, ChargeIntent } from '../domain/charge.js';
import type { Refund, RefundIntent } from '../domain/refund.js';
import type { ChargePage } from '../ledger/listing.js';
import type { LedgerPool } from '../ledger/pool.js';
import { chargeTaskQueue, type ChargePolicy } from '../../workflows/definitions.js';
import { cancelCharge, captureCharge } from './charge-updates.js';
import { charge, getCharge, startCharge, type AdmissionHints, type ChargeReply } from './charges.js';
import type { ServiceContext } from './context.js';
import { buildChargeIntent, buildRefundIntent } from './intent.js';
import { listCharges, listChargesFromQuery, type ChargeListQuery } from './listing.js';
import { getEvent, listEventsFromQuery, type EventReader, type StoredEvent } from './events.js';
import { getRefund, listRefundPage, listRefunds, listRefundsFromQuery, refund, type RefundReply } from './refunds.js';
import type { ChargeHandle } from './start-or-attach.js';
import { ChargeAdmission, type ChargeAdmissionOptions } from './admission.js';
import { defaultWorkflowTaskTimeoutMs } from '../../workflows/task-timeouts.js';
import { translateFailures } from './temporal-failures.js';
import { assertEmptyBody, parseCaptureBody, parseOptionalAmount, parsePageQuery } from './validation.js';
import { boundedWaitMs } from './waiting.js';
import { mandateRefusal, type Mandate } from '../domain/mandate.js';
import { MandateExceededError } from '../domain/errors.js';

export type { AdmissionHints, ChargeReply } from './charges.js';
export type { ChargeListQuery } from './listing.js';
export { RefundRefusedError, type RefundReply } from './refunds.js';

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
  /** Workflow task timeout of the charges and refunds this service starts (start-or-attach.ts, defaultWorkflowTaskTimeoutMs). */
  workflowTaskTimeoutMs?: number;
  /**
   * Ask the server to hand a new charge's first workflow task straight back to a worker in this
   * process (eager workflow start), saving the task's trip through the task queue. Only valid when
   * `temporal` is a Client on the worker's own NativeConnection; the server falls back to the queue
   * when that worker has no free slot.
   */
  eagerWorkflowStart?: boolean;
  /**
   * Admission of new charges (src/service/admission.ts): beyond `maxChargesInFlight` undecided
   * charges started by this process, a new key is refused at once (OverloadedError) before anything
   * is recorded or started. Absent: no bound (a library caller that paces itself).
   */
  admission?: ChargeAdmissionOptions;
}

const defaultStartTimeoutMs = 5_000;

/** Per call: when the caller stops listening. */
export interface CallOptions {
  /**
   * A point in time (milliseconds since the Unix epoch) after which no Temporal call of this
   * operation may still be waiting; an expired one is answered as UnavailableError. Without it, an
   * update sent to a charge whose worker is down, or the gRPC client's own retries while the
   * server is away, could hold the caller indefinitely. Bounds of the service's own (the start
   * timeout, the wait) apply within it.
   */
  deadlineEpochMs?: number;
  /**
   * The API key making a new charge, with its mandate: a charge outside the mandate is refused
   * (MandateExceededError) before anything starts, and the key (with its daily limit) travels in
   * the intent to the ledger's Try. Absent: the operator, who acts with database access.
   */
  actor?: ChargeActor;
}

export interface ChargeActor {
  keyId: string;
  mandate: Mandate;
}

/** Per call, for operations that wait for an outcome. */
export interface WaitOptions extends CallOptions {
  /** How long to wait for the outcome; at most, and by default, the service's wait budget. */
  waitMs?: number;
}

/** Per call, for operations that start a charge: what the caller knows already about its key. */
export interface StartOptions extends WaitOptions {
  admission?: AdmissionHints;
}

/**
 * The one module that owns the idempotency rules. Every surface (HTTP API, MCP server, CLI, the
 * TypeScript API) calls it, and none decides on its own whether a request is new, a replay or a
 * conflict. Methods taking `body` take it as it arrived (parsed JSON, unvalidated); the service
 * validates it.
 */
export class ChargeService {
  private readonly ctx: ServiceContext;
  private readonly closer = new AbortController();

  constructor(options: ChargeServiceOptions) {
    this.ctx = {
      temporal: options.temporal,
      ledger: options.ledger,
      policy: options.policy,
      amountMinorMax: options.amountMinorMax,
      waitBudgetMs: options.waitBudgetMs,
      startTimeoutMs: options.startTimeoutMs ?? defaultStartTimeoutMs,
      taskQueue: options.taskQueue ?? chargeTaskQueue,
      workflowTaskTimeoutMs: options.workflowTaskTimeoutMs ?? defaultWorkflowTaskTimeoutMs,
      eagerWorkflowStart: options.eagerWorkflowStart ?? false,
      admission: options.admission ? new ChargeAdmission(options.admission) : null,
      closing: this.closer.signal,
    };
  }

  /**
   * Stops what runs after its caller was answered (the watches that keep an undecided charge's
   * admission place): call before closing the Temporal connection, whose calls would otherwise be
   * retried on a closed channel.
   */
  close(): void {
    this.closer.abort();
  }

  /** This process's admission of new charges (null: unbounded), for its metrics. */
  get admission(): ChargeAdmission | null {
    return this.ctx.admission;
  }

  /** Start the charge or attach to the one already started under this key, and wait for its outcome. */
  async charge(tenant: string, idempotencyKey: string, body: unknown, options: StartOptions = {}): Promise<ChargeReply> {
    return this.run(options, () =>
      charge(
        this.ctx,
        this.buildIntent(tenant, idempotencyKey, body, options.actor),
        boundedWaitMs(options.waitMs, this.ctx.waitBudgetMs),
        options.admission,
      ),
    );
  }

  /** Start the charge (or attach) without waiting: for callers that poll or that hold the handle. */
  async startCharge(
    tenant: string,
    idempotencyKey: string,
    body: unknown,
    options: CallOptions = {},
  ): Promise<{ handle: ChargeHandle; replayed: boolean }> {
    return this.run(options, () => startCharge(this.ctx, this.buildIntent(tenant, idempotencyKey, body, options.actor)));
  }

  /** The charge as it stands now: the ledger once decided (refunds included), the workflow while open. */
  async getCharge(tenant: string, idempotencyKey: string, options: CallOptions = {}): Promise<Charge> {
    return this.run(options, () => getCharge(this.ctx, tenant, idempotencyKey));
  }

  /** Cancel an open charge. A repeated cancel returns the cancelled charge; a cancel after success is refused. */
  async cancelCharge(tenant: string, idempotencyKey: string, options: CallOptions = {}): Promise<Charge> {
    return this.run(options, () => cancelCharge(this.ctx, tenant, idempotencyKey));
  }

  /** cancelCharge for a request that carries a body: none, or `{}` (a cancel takes no parameters). */
  async cancelChargeFromBody(tenant: string, idempotencyKey: string, body: unknown, options: CallOptions = {}): Promise<Charge> {
    assertEmptyBody(body);
    return this.cancelCharge(tenant, idempotencyKey, options);
  }

  /** Capture a manual-capture charge, all of it (null) or `amountMinor` of it (the rest is released). */
  async captureCharge(
    tenant: string,
    idempotencyKey: string,
    amountMinor: number | null = null,
    options: CallOptions = {},
  ): Promise<Charge> {
    const amount = parseOptionalAmount(amountMinor, 'amount', this.ctx.amountMinorMax);
    return this.run(options, () => captureCharge(this.ctx, tenant, idempotencyKey, amount));
  }

  /** captureCharge for the body on the wire: none or `{}` (all of it), or `{amount}`; `"amount": null` is refused. */
  async captureChargeFromBody(tenant: string, idempotencyKey: string, body: unknown, options: CallOptions = {}): Promise<Charge> {
    return this.captureCharge(tenant, idempotencyKey, parseCaptureBody(body, this.ctx.amountMinorMax), options);
  }

  /**
   * Refund a captured charge, all that is left of it (`{}`) or `{amount}` of it, exactly once per
   * refund key. A repeated request returns the first result; the same refund key with another
   * amount is an IdempotencyConflictError; a refused refund is a RefundRefusedError, every time.
   */
  async refund(tenant: string, chargeKey: string, refundKey: string, body: unknown, options: WaitOptions = {}): Promise<RefundReply> {
    return this.run(options, () =>
      refund(
        this.ctx,
        {
          ...this.buildRefundIntent(tenant, chargeKey, refundKey, body),
          ...(options.actor ? { actingKeyId: options.actor.keyId } : {}),
        },
        boundedWaitMs(options.waitMs, this.ctx.waitBudgetMs),
      ),
    );
  }

  /** One refund as it stands: the ledger's decision, or pending while its workflow runs. */
  async getRefund(tenant: string, chargeKey: string, refundKey: string, options: CallOptions = {}): Promise<Refund> {
    return this.run(options, () => getRefund(this.ctx, tenant, chargeKey, refundKey));
  }

  /** Every refund of one charge (up to 100), refused ones included, oldest first. */
  async listRefunds(tenant: string, chargeKey: string): Promise<Refund[]> {
    return this.run({}, () => listRefunds(this.ctx, tenant, chargeKey));
  }

  /** `GET /v1/refunds`: the tenant's refunds, or with `charge=…` a charge's, by its id or key (a 400 naming `charge` when it is not this tenant's). */
  async listRefundsByQuery(tenant: string, rawQuery: Record<string, unknown>): Promise<{ chargeKey: string | null; refunds: Refund[]; hasMore: boolean }> {
    return this.run({}, () => listRefundsFromQuery(this.ctx, tenant, rawQuery));
  }

  /** listRefunds for a query string as the HTTP parser hands it over (limit, starting_after, ending_before). */
  async listRefundsFromQuery(tenant: string, chargeKey: string, rawQuery: Record<string, unknown>): Promise<{ refunds: Refund[]; hasMore: boolean }> {
    return this.run({}, () => listRefundPage(this.ctx, tenant, chargeKey, parsePageQuery(rawQuery)));
  }

  /**
   * Charges by order id, payer account and status, newest first, from the ledger (which keeps
   * every key forever; Temporal's visibility forgets closed workflows after the retention period).
   */
  async listCharges(tenant: string, query: ChargeListQuery = {}): Promise<ChargePage> {
    return this.run({}, () => listCharges(this.ctx, tenant, query));
  }

  /** listCharges for a query string as the HTTP parser hands it over (strings, or arrays when a name repeats). */
  async listChargesFromQuery(tenant: string, rawQuery: Record<string, unknown>): Promise<ChargePage> {
    return this.run({}, () => listChargesFromQuery(this.ctx, tenant, rawQuery));
  }

  /**
   * `GET /v1/events`: the tenant's events newest first, by type and object id, paged by event id
   * (docs/events.md); only those of objects the reader's role may read (src/service/events.ts).
   */
  async listEventsFromQuery(tenant: string, rawQuery: Record<string, unknown>, reader: EventReader): Promise<{ events: StoredEvent[]; hasMore: boolean }> {
    return this.run({}, () => listEventsFromQuery(this.ctx, tenant, rawQuery, reader));
  }

  /** `GET /v1/events/{id}`: one event of the tenant the reader may see (NotFoundError for any other). */
  async getEvent(tenant: string, id: string, reader: EventReader): Promise<StoredEvent> {
    return this.run({}, () => getEvent(this.ctx, tenant, id, reader));
  }

  /** Validates the request and builds the intent: the same (tenant, key, body) always gives the same intent. */
  /**
   * Validates a charge request and builds its intent; with an actor, judges the actor's mandate
   * first (throws MandateExceededError naming the rule) and names the actor in the intent.
   */
  buildIntent(tenant: string, idempotencyKey: string, body: unknown, actor?: ChargeActor): ChargeIntent {
    const intent = buildChargeIntent(tenant, idempotencyKey, body, this.ctx.amountMinorMax);
    if (actor === undefined) return intent;
    const refusal = mandateRefusal(actor.mandate, intent.request, Date.now());
    if (refusal !== null) throw new MandateExceededError(refusal.rule, refusal.detail);
    return {
      ...intent,
      actingKeyId: actor.keyId,
      ...(actor.mandate.dailyLimitMinor !== null ? { dailyLimitMinor: actor.mandate.dailyLimitMinor } : {}),
    };
  }

  /** Validates a refund request and builds its intent: the same (tenant, keys, body) always gives the same intent. */
  buildRefundIntent(tenant: string, chargeKey: string, refundKey: string, body: unknown): RefundIntent {
    return buildRefundIntent(tenant, chargeKey, refundKey, body, this.ctx.amountMinorMax);
  }

  /** Every operation: the caller's deadline around it, Temporal's failures translated inside it. */
  private async run<T>(options: CallOptions, operation: () => Promise<T>): Promise<T> {
    const translated = () => translateFailures(operation);
    if (options.deadlineEpochMs === undefined) return translated();
    return this.ctx.temporal.withDeadline(options.deadlineEpochMs, translated);
  }
}
