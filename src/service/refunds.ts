import { WorkflowNotFoundError } from '@temporalio/client';
import type { Refund, RefundIntent } from '../domain/refund.js';
import { refundRefusals } from '../domain/refusals.js';
import { readCharge } from '../ledger/charges.js';
import {
  findRefundCursor,
  findTenantRefundCursor,
  listRefundPage as listLedgerRefundPage,
  listTenantRefundPage as listLedgerTenantRefundPage,
  readRefund,
} from '../ledger/refunds.js';
import { pageCursorOf, resolveCursor } from './listing.js';
import { limits } from '../domain/limits.js';
import { refundStatusQuery } from '../../workflows/definitions.js';
import type { ServiceContext } from './context.js';
import { ChargeStateConflictError, NotFoundError } from '../domain/errors.js';
import { refundHandle, startOrAttachRefund } from './start-or-attach.js';
import { applicationFailureIn, stateConflict } from './temporal-failures.js';
import { undecodableInputType } from '../../workflows/authenticated-start.js';
import { forgedStartType } from '../../workflows/verify-start.js';
import { assertIdempotencyKey, parseRefundListQuery, type ValidPageQuery } from './validation.js';
import { assertTenant } from '../domain/identifiers.js';
import { findChargeCursor } from '../ledger/listing.js';
import { waitForOutcome } from './waiting.js';

/** What a refund call answers, as ChargeReply does for a charge. */
export interface RefundReply {
  refund: Refund;
  /** True when the refund key was already known: this call started nothing. */
  replayed: boolean;
  /** False when the wait budget ran out first; the refund goes on and the same call later returns it. */
  completed: boolean;
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
 * Refunds a captured charge exactly once per refund key, waiting at most `waitMs` for the outcome.
 * A refused refund is a RefundRefusedError, every time.
 */
export async function refund(ctx: ServiceContext, intent: RefundIntent, waitMs: number): Promise<RefundReply> {
  const { tenant, chargeKey } = intent;
  const charge = await readCharge(ctx.ledger, tenant, chargeKey);
  // Refused before anything starts: a captured charge stays captured, so a replay of an
  // accepted refund key always passes these checks again.
  if (!charge) throw new NotFoundError(`no charge with idempotency key ${chargeKey}`);
  if (charge.holdState !== 'CONFIRMED') {
    throw stateConflict({ name: 'notCaptured', detail: `charge ${chargeKey} is ${charge.charge.status}` });
  }
  const attached = await startOrAttachRefund(ctx, intent, charge);
  if ('settled' in attached) return { refund: refusedOrSucceeded(attached.settled), replayed: true, completed: true };
  const { handle, started } = attached;
  const outcome = await waitForOutcome(ctx, handle, waitMs);
  if (outcome) return { refund: refusedOrSucceeded(outcome), replayed: !started, completed: true };
  return { refund: await handle.query(refundStatusQuery), replayed: !started, completed: false };
}

/** One refund as it stands: the ledger's decision, or pending while its workflow runs. */
export async function getRefund(ctx: ServiceContext, tenant: string, chargeKey: string, refundKey: string): Promise<Refund> {
  assertTenant(tenant);
  assertIdempotencyKey(chargeKey, 'charge_key');
  assertIdempotencyKey(refundKey, 'refund_key');
  const row = await readRefund(ctx.ledger, tenant, chargeKey, refundKey);
  if (row) return row.refund;
  const handle = refundHandle(ctx, tenant, chargeKey, refundKey);
  try {
    const description = await handle.describe();
    if (description.status.name === 'RUNNING') return await handle.query(refundStatusQuery);
    // Read again: the workflow closed after the first read, so the ledger may have decided since.
    const settled = await readRefund(ctx.ledger, tenant, chargeKey, refundKey);
    if (settled) return settled.refund;
    if (description.status.name === 'COMPLETED') return await handle.result();
    // Closed without a ledger row: a refusal the ledger decided is translated as such; any other
    // ending (a start the service did not make, an undecodable input, terminated) refunded nothing.
    const failure = await handle.result().then(
      () => null,
      (error: unknown) => error,
    );
    const type = applicationFailureIn(failure)?.type;
    if (type !== undefined && type !== forgedStartType && type !== undecodableInputType && failure !== null) throw failure;
    const why = type ?? `its workflow ended ${description.status.name.toLowerCase()}`;
    throw new NotFoundError(`no refund ${refundKey} of charge ${chargeKey}: nothing was refunded under it (${why})`);
  } catch (error) {
    if (error instanceof WorkflowNotFoundError) throw new NotFoundError(`no refund ${refundKey} of charge ${chargeKey}`);
    throw error;
  }
}

/** The refunds of one charge, refused ones included, oldest first: a page of them (`page`: limit and cursor). */
export async function listRefundPage(
  ctx: ServiceContext,
  tenant: string,
  chargeKey: string,
  page: ValidPageQuery,
): Promise<{ refunds: Refund[]; hasMore: boolean }> {
  assertTenant(tenant);
  assertIdempotencyKey(chargeKey, 'charge_key');
  if (!(await readCharge(ctx.ledger, tenant, chargeKey))) {
    throw new NotFoundError(`no charge with idempotency key ${chargeKey}`);
  }
  const cursor = pageCursorOf(page);
  const refundKey = cursor ? await resolveCursor(cursor, 'refund', (value) => findRefundCursor(ctx.ledger, tenant, chargeKey, value)) : null;
  return listLedgerRefundPage(ctx.ledger, tenant, chargeKey, {
    limit: page.limit,
    cursor: cursor && refundKey !== null ? { direction: cursor.direction, refundKey } : null,
  });
}

/** A refused refund is an error for the caller, the same one on every replay. */
function refusedOrSucceeded(refund: Refund): Refund {
  if (refund.status === 'failed') throw new RefundRefusedError(refund);
  return refund;
}

/** Every refund of one charge (up to the list limit, 100), refused ones included, oldest first. */
export async function listRefunds(ctx: ServiceContext, tenant: string, chargeKey: string): Promise<Refund[]> {
  return (await listRefundPage(ctx, tenant, chargeKey, { limit: limits.listLimitMax })).refunds;
}

/**
 * `GET /v1/refunds`, as Stripe's clients ask for refunds. With `charge` (its id `ch_…` or idempotency
 * key): that charge's refunds, the same page as listRefundPage (oldest first); a charge that is not
 * this tenant's is a 400 naming `charge`, as an unknown cursor is. Without it: every refund of the
 * tenant, newest first, the cursor a refund's id (`re_…`: refund keys are unique only per charge).
 */
export async function listRefundsFromQuery(
  ctx: ServiceContext,
  tenant: string,
  raw: Record<string, unknown>,
): Promise<{ chargeKey: string | null; refunds: Refund[]; hasMore: boolean }> {
  assertTenant(tenant);
  const query = parseRefundListQuery(raw);
  if (query.charge === undefined) return { chargeKey: null, ...(await listTenantRefunds(ctx, tenant, query)) };
  const chargeKey = await resolveCursor(
    { value: query.charge, field: 'charge' },
    'charge',
    (value) => findChargeCursor(ctx.ledger, tenant, value),
    "names no charge of this tenant: give a charge's id (ch_…) or idempotency key",
  );
  return { chargeKey, ...(await listRefundPage(ctx, tenant, chargeKey, query)) };
}

async function listTenantRefunds(ctx: ServiceContext, tenant: string, page: ValidPageQuery): Promise<{ refunds: Refund[]; hasMore: boolean }> {
  const cursor = pageCursorOf(page);
  const refundId = cursor
    ? await resolveCursor(cursor, 'refund', (value) => findTenantRefundCursor(ctx.ledger, tenant, value),
        "names no refund of this tenant: give the id (re_…) of a refund from an earlier page")
    : null;
  return listLedgerTenantRefundPage(ctx.ledger, tenant, {
    limit: page.limit,
    cursor: cursor && refundId !== null ? { direction: cursor.direction, refundId } : null,
  });
}
