import type { ChargeStatus } from '../domain/charge.js';
import { listCharges as listLedgerCharges, type ChargePage } from '../ledger/listing.js';
import type { ServiceContext } from './context.js';
import { assertTenant, parseChargeListQuery, validateChargeListQuery, type ValidChargeListQuery } from './validation.js';

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

function listValid(ctx: ServiceContext, tenant: string, valid: ValidChargeListQuery): Promise<ChargePage> {
  return listLedgerCharges(ctx.ledger, tenant, {
    orderId: valid.orderId ?? null,
    payerAccountId: valid.payerAccountId ?? null,
    status: valid.status ?? null,
    limit: valid.limit,
    startingAfter: valid.startingAfter ?? null,
  });
}
