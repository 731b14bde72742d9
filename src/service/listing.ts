import type { ChargeStatus } from '../domain/charge.js';
import { findChargeCursor, listCharges as listLedgerCharges, type ChargePage } from '../ledger/listing.js';
import type { ServiceContext } from './context.js';
import { ValidationError } from '../domain/errors.js';
import {
  parseChargeListQuery,
  validateChargeListQuery,
  type ValidChargeListQuery,
  type ValidPageQuery,
} from './validation.js';
import { assertTenant } from '../domain/identifiers.js';

/** Filters for finding charges; every one optional, newest first. */
export interface ChargeListQuery {
  orderId?: string;
  payerAccountId?: string;
  status?: ChargeStatus;
  /** 1 to 100; 20 when omitted. */
  limit?: number;
  /** The last charge of the previous page: its id (`ch_…`) or its idempotency key. */
  startingAfter?: string;
  /** The first charge of the next page, paging back towards newer charges: its id or its idempotency key. */
  endingBefore?: string;
}

/**
 * Charges by order id, payer account and status, newest first, from the ledger (which keeps
 * every key forever; Temporal's visibility forgets closed workflows after the retention period).
 */
export async function listCharges(ctx: ServiceContext, tenant: string, query: ChargeListQuery): Promise<ChargePage> {
  assertTenant(tenant);
  return listValid(ctx, tenant, validateChargeListQuery(query));
}

/** As listCharges, for the query string of `GET /v1/charges` as the HTTP parser hands it over. */
export async function listChargesFromQuery(ctx: ServiceContext, tenant: string, rawQuery: Record<string, unknown>): Promise<ChargePage> {
  assertTenant(tenant);
  return listValid(ctx, tenant, parseChargeListQuery(rawQuery));
}

async function listValid(ctx: ServiceContext, tenant: string, valid: ValidChargeListQuery): Promise<ChargePage> {
  const cursor = pageCursorOf(valid);
  const page = cursor
    ? { direction: cursor.direction, idempotencyKey: await resolveCursor(cursor, 'charge', (value) => findChargeCursor(ctx.ledger, tenant, value)) }
    : null;
  return listLedgerCharges(ctx.ledger, tenant, {
    orderId: valid.orderId ?? null,
    payerAccountId: valid.payerAccountId ?? null,
    status: valid.status ?? null,
    limit: valid.limit,
    page,
  });
}

/** The one cursor of a validated page query (validation refuses both), with the parameter that carried it. */
export function pageCursorOf(page: ValidPageQuery): { direction: 'after' | 'before'; value: string; field: string } | null {
  if (page.startingAfter !== undefined) return { direction: 'after', value: page.startingAfter, field: 'starting_after' };
  if (page.endingBefore !== undefined) return { direction: 'before', value: page.endingBefore, field: 'ending_before' };
  return null;
}

/**
 * A cursor names an object of this list in this tenant, or the request is refused naming the
 * parameter: an empty page would read as "no more objects" and end a client's pagination early,
 * as Stripe's clients would (Stripe answers an error for an unknown cursor object too).
 */
export async function resolveCursor<T>(
  cursor: { value: string; field: string },
  what: string,
  find: (value: string) => Promise<T | null>,
  message = `names no ${what} of this list for this tenant: give the id of an object from an earlier page`,
): Promise<T> {
  const found = await find(cursor.value);
  if (found === null) throw new ValidationError([{ field: cursor.field, message }]);
  return found;
}
