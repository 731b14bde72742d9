import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, type WorkflowHandle } from '@temporalio/client';
import type { Charge, ChargeIntent, ChargeRequest } from '../domain/charge.js';
import { chargeWorkflowId, decidedStatuses } from '../domain/charge.js';
import { refundWorkflowId, type Refund, type RefundIntent } from '../domain/refund.js';
import { getAccountCurrencies } from '../ledger/accounts.js';
import { keyDailyTotalMinor, readCharge, type LedgerCharge } from '../ledger/charges.js';
import { dailyLimitRefusal } from '../domain/mandate.js';
import { readRefund } from '../ledger/refunds.js';
import {
  refundWorkflowType,
  type ChargeMemo,
  type ChargeWorkflowInput,
  type RefundMemo,
  type RefundWorkflowInput,
} from '../../workflows/definitions.js';
import type { ChargeWorkflow } from '../../workflows/charge-workflow.js';
import type { RefundWorkflow } from '../../workflows/refund-workflow.js';
import { chargeSearchAttributeKeys, startSearchAttributes } from '../../workflows/search-attributes.js';
import type { SearchAttributePair } from '@temporalio/common';
import type { ServiceContext } from './context.js';
import { IdempotencyConflictError, MandateExceededError, ValidationError, type FieldError } from '../domain/errors.js';
import { chargeFingerprint, fingerprintLike, refundFingerprint } from './intent.js';

/**
 * Starting a charge or a refund exactly once per key, or attaching to the one already started.
 *
 * Order of reads, for both: first the ledger (the key's row, which is the first request's forever;
 * for a new charge, its accounts at the same time), then Temporal (start; when Temporal refuses a
 * second start, describe the execution that holds the id and compare its memo). The ledger is not
 * read again after Temporal: a row's fingerprint never changes and a decided row stays decided, so
 * the row read first answers whatever a second read could. A row written in between would be the
 * execution's that holds the id, whose memo carries the same fingerprint.
 */

export type ChargeHandle = WorkflowHandle<typeof ChargeWorkflow>;
export type RefundHandle = WorkflowHandle<typeof RefundWorkflow>;

export type Attached<Handle, Settled> = { handle: Handle; started: boolean } | { settled: Settled };

export function chargeHandle(ctx: ServiceContext, tenant: string, idempotencyKey: string): ChargeHandle {
  return ctx.temporal.workflow.getHandle<typeof ChargeWorkflow>(chargeWorkflowId(tenant, idempotencyKey));
}

export function refundHandle(ctx: ServiceContext, tenant: string, chargeKey: string, refundKey: string): RefundHandle {
  return ctx.temporal.workflow.getHandle<typeof RefundWorkflow>(refundWorkflowId(tenant, chargeKey, refundKey));
}

/**
 * Starts the charge, or attaches to the execution already started for this key when it is the same
 * request; a decided charge whose row is the original answer is answered from the ledger alone.
 * Bounded by the start timeout: cutting it short is safe, as a retry with the same key attaches to
 * whatever the cut call started.
 */
export async function startOrAttachCharge(ctx: ServiceContext, built: ChargeIntent): Promise<Attached<ChargeHandle, Charge>> {
  return ctx.temporal.withDeadline(Date.now() + ctx.startTimeoutMs, () => startOrAttachChargeUnbounded(ctx, built));
}

async function startOrAttachChargeUnbounded(ctx: ServiceContext, built: ChargeIntent): Promise<Attached<ChargeHandle, Charge>> {
  const { tenant, idempotencyKey } = built;
  // All at once: a new charge needs the accounts checked and its key's daily total read, a replay
  // needs only the row (the total is then not judged: a key's recorded charge is answered as it is).
  const [recorded, , keyDailyTotal] = await Promise.all([
    readCharge(ctx.ledger, tenant, idempotencyKey),
    assertAccountsUsable(ctx, tenant, built.request),
    built.actingKeyId !== undefined && built.dailyLimitMinor !== undefined
      ? keyDailyTotalMinor(ctx.ledger, built.actingKeyId, built.chargeId)
      : null,
  ]);
  if (recorded === null && keyDailyTotal !== null) await assertWithinDailyLimit(ctx, built, keyDailyTotal);
  // A key recorded under an earlier fingerprint definition is compared under that definition,
  // and the intent carries that fingerprint so the ledger's own comparison in Try agrees.
  const like = (first: string | undefined): string => fingerprintLike(first, (version) => chargeFingerprint(built.request, version));
  const intent: ChargeIntent = recorded === null ? built : { ...built, fingerprint: like(recorded.fingerprint) };
  if (recorded !== null) {
    // A different request is a conflict, and a decided charge is answered from the row without a
    // Temporal call (a few ms instead of the round trips of start, describe and result). Once
    // refunds touched the row it no longer is the original answer, so those replays still ask the
    // workflow for its result.
    if (recorded.fingerprint !== intent.fingerprint) throw chargeKeyConflict(idempotencyKey);
    if (decidedStatuses.has(recorded.charge.status) && recorded.charge.amountRefundedMinor === 0) {
      return { settled: recorded.charge };
    }
  }
  const memo: ChargeMemo = { fingerprint: intent.fingerprint };
  const input: ChargeWorkflowInput = { intent, policy: ctx.policy };
  try {
    const handle = await ctx.temporal.workflow.start<typeof ChargeWorkflow>('ChargeWorkflow', {
      taskQueue: ctx.taskQueue,
      workflowId: chargeWorkflowId(tenant, idempotencyKey),
      args: [input],
      memo: { ...memo },
      typedSearchAttributes: startSearchAttributes(intent),
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
      workflowIdConflictPolicy: 'FAIL',
      workflowTaskTimeout: ctx.workflowTaskTimeoutMs,
      ...(ctx.eagerWorkflowStart ? { requestEagerStart: true } : {}),
    });
    return { handle, started: true };
  } catch (error) {
    if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
  }
  // Temporal refused a second start: attach to the first one, if it is the same request.
  const handle = chargeHandle(ctx, tenant, idempotencyKey);
  const description = await handle.describe();
  const firstFingerprint = (description.memo as Partial<ChargeMemo> | undefined)?.fingerprint;
  if (firstFingerprint !== undefined && firstFingerprint === like(firstFingerprint)) return { handle, started: false };
  // The ledger outranks the memo: after Temporal forgot a key, a mismatched request may have
  // started (and failed) an execution whose memo is wrong, while the ledger keeps the original.
  if (recorded && decidedStatuses.has(recorded.charge.status)) return { settled: recorded.charge };
  throw chargeKeyConflict(idempotencyKey);
}

/** As startOrAttachCharge, for refunds: Temporal rejects the second start, the memo or the ledger judges the request. */
export async function startOrAttachRefund(
  ctx: ServiceContext,
  built: RefundIntent,
  charge: LedgerCharge,
): Promise<Attached<RefundHandle, Refund>> {
  const { tenant, chargeKey, refundKey } = built;
  // The ledger's row is the first request's, forever, and may carry a fingerprint of an earlier
  // definition: the request is compared under that one, and the intent carries it, so that the
  // ledger's own comparison agrees should Temporal have forgotten the refund's workflow.
  const recorded = await readRefund(ctx.ledger, tenant, chargeKey, refundKey);
  const like = (first: string | undefined): string => fingerprintLike(first, (version) => refundFingerprint(built.amountMinor, version));
  const intent: RefundIntent = recorded === null ? built : { ...built, fingerprint: like(recorded.fingerprint) };
  if (recorded !== null) {
    if (recorded.fingerprint !== intent.fingerprint) throw refundKeyConflict(chargeKey, refundKey);
    return { settled: recorded.refund };
  }
  const memo: RefundMemo = { fingerprint: intent.fingerprint };
  const input: RefundWorkflowInput = {
    intent,
    pending: pendingRefund(intent, charge, new Date()),
    policy: { activityStartToCloseMs: ctx.policy.activityStartToCloseMs },
  };
  try {
    const handle = await ctx.temporal.workflow.start<typeof RefundWorkflow>(refundWorkflowType, {
      taskQueue: ctx.taskQueue,
      workflowId: refundWorkflowId(tenant, chargeKey, refundKey),
      args: [input],
      memo: { ...memo },
      typedSearchAttributes: refundStartSearchAttributes(charge),
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
      workflowIdConflictPolicy: 'FAIL',
      workflowTaskTimeout: ctx.workflowTaskTimeoutMs,
    });
    return { handle, started: true };
  } catch (error) {
    if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
  }
  const handle = refundHandle(ctx, tenant, chargeKey, refundKey);
  const description = await handle.describe();
  const firstFingerprint = (description.memo as Partial<RefundMemo> | undefined)?.fingerprint;
  if (firstFingerprint !== undefined && firstFingerprint === like(firstFingerprint)) return { handle, started: false };
  // No row was read (a row would have answered above), so nothing outranks the memo here.
  throw refundKeyConflict(chargeKey, refundKey);
}

/**
 * The mandate's rolling 24 h total, judged before anything starts: a charge that does not fit is a
 * MandateExceededError (403 naming `daily_limit`), nothing recorded, its key free for another
 * request. The one exception is a key whose workflow an earlier request already started and whose
 * Try has not run yet (so no row): that request was admitted, and this repeat attaches to it rather
 * than answering differently; the ledger's Try decides it. The ledger's Try also sums again, under a
 * per-key lock, for charges that passed this check together and do not fit together.
 */
async function assertWithinDailyLimit(ctx: ServiceContext, intent: ChargeIntent, keyDailyTotal: number): Promise<void> {
  const refusal = dailyLimitRefusal(intent.dailyLimitMinor!, keyDailyTotal, intent.request.amountMinor);
  if (refusal === null) return;
  try {
    await chargeHandle(ctx, intent.tenant, intent.idempotencyKey).describe();
    return; // started by an earlier request: attach
  } catch (error) {
    if (!(error instanceof WorkflowNotFoundError)) throw error;
  }
  throw new MandateExceededError(refusal.rule, refusal.detail);
}

/**
 * Unknown accounts and currency mismatches are refused before anything is recorded. The ledger's
 * Try checks again (and declines), should an account change in between.
 */
async function assertAccountsUsable(ctx: ServiceContext, tenant: string, request: ChargeRequest): Promise<void> {
  // A provider charge's payer is the clearing account, which the ledger's provider Try derives and
  // opens on first use: only the payee is the caller's to name.
  const named: Array<readonly ['payer_account_id' | 'payee_account_id', string]> = [
    ...(request.paymentMethod ? [] : [['payer_account_id', request.payerAccountId] as const]),
    ['payee_account_id', request.payeeAccountId] as const,
  ];
  const currencies = await getAccountCurrencies(ctx.ledger, tenant, named.map(([, id]) => id));
  const errors: FieldError[] = [];
  for (const [field, id] of named) {
    const currency = currencies.get(id);
    if (currency === undefined) errors.push({ field, message: `no account ${id} for this tenant` });
    else if (currency !== request.currency) {
      errors.push({ field: 'currency', message: `account ${id} holds ${currency}, not ${request.currency}` });
    }
  }
  if (errors.length > 0) throw new ValidationError(errors);
}

/**
 * What a refund is indexed by in Temporal's visibility: its charge's tenant, order, payer and
 * currency, set once in the start request (no write of its own), so the queries that find an
 * order's or a tenant's charges (`ChargeTenant = 'x'`) find their refunds too; `WorkflowType`
 * tells them apart. Neither the amount (a refund's may be "the rest") nor a status is indexed.
 */
export function refundStartSearchAttributes(charge: LedgerCharge): SearchAttributePair[] {
  const keys = chargeSearchAttributeKeys;
  const { tenant, orderId, payerAccountId, currency } = charge.charge;
  return [
    { key: keys.tenant, value: tenant },
    { key: keys.orderId, value: orderId },
    { key: keys.payerAccountId, value: payerAccountId },
    { key: keys.currency, value: currency },
  ];
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

function chargeKeyConflict(idempotencyKey: string): IdempotencyConflictError {
  return new IdempotencyConflictError(
    `idempotency key ${idempotencyKey} was already used for a different charge request; ` +
      'use a new key for a new charge, or resend the original request unchanged',
  );
}

function refundKeyConflict(chargeKey: string, refundKey: string): IdempotencyConflictError {
  return new IdempotencyConflictError(
    `refund key ${refundKey} was already used for a different refund of charge ${chargeKey}; ` +
      'use a new refund key for a new refund, or resend the original request unchanged',
  );
}
