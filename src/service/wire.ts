import { z } from 'zod';
import { chargeStatuses, type Charge } from '../domain/charge.js';
import { captureModes } from '../domain/capture-modes.js';
import type { Refund } from '../domain/refund.js';
import { refundFailureCodes, refundStatuses } from '../domain/refund-outcomes.js';
import { declineCodes } from '../domain/refusals.js';
import { providerNames, providerPaymentStates, type ChargeProviderPayment } from '../domain/providers.js';
import type { Account } from '../ledger/accounts.js';

/**
 * The wire format of docs/contract.md, Surfaces (JSON, snake_case), in one place so the HTTP API, the MCP
 * server and the CLI print the same objects. The zod schemas describe what the mappers produce:
 * the OpenAPI document is generated from them and the tests check responses against them.
 * The problem document of an error is src/http/problem.ts's, beside the code that writes it.
 */

const timestamp = z.string().describe('RFC 3339 timestamp (UTC)');
const minorUnits = z.number().int().describe("integer amount in the currency's minor unit (cents)");

export const chargeStatusSchema = z.enum(chargeStatuses);

/** The provider's `next_action` (Stripe: `{type: "use_stripe_sdk" | "redirect_to_url", ...}`), passed on untouched. */
const nextActionSchema = z
  .record(z.string(), z.unknown())
  .nullable()
  .describe("what the payer must do (3-D Secure), as the provider said it (Stripe's PaymentIntent next_action, untouched)");

export const wireProviderPaymentSchema = z
  .object({
    name: z.enum(providerNames).describe('the payment provider'),
    payment_id: z.string().nullable().describe("the provider's payment id (Stripe: pi_...); null until the provider answered"),
    state: z
      .enum(providerPaymentStates)
      .nullable()
      .describe('where the payment stands at the provider; null while nothing was sent'),
    next_action: nextActionSchema.describe('present (not null) while state is requires_action: what the payer must do'),
    decline_code: z
      .string()
      .nullable()
      .describe("the provider's own decline code (Stripe: e.g. card_velocity_exceeded), beside the charge's decline_code"),
  })
  .describe('a charge paid through a payment provider: its side of the payment');

export const wireChargeSchema = z
  .object({
    id: z.string().describe('stable id derived from (tenant, idempotency key)'),
    object: z.literal('charge'),
    idempotency_key: z.string(),
    status: chargeStatusSchema,
    amount: minorUnits,
    amount_captured: minorUnits,
    amount_refunded: minorUnits,
    currency: z.string().describe('ISO 4217 code, upper case'),
    order_id: z.string(),
    payer_account_id: z
      .string()
      .describe("the account debited; for a charge through a provider, the tenant's clearing account @provider/<provider>/<currency>"),
    payment_method: z.string().optional().describe("present for a charge through a provider: the payer's instrument there, as sent"),
    payee_account_id: z.string(),
    capture: z.enum(captureModes),
    description: z.string().nullable(),
    metadata: z.record(z.string(), z.string()).nullable(),
    decline_code: z
      .enum(declineCodes)
      .optional()
      .describe('present when status is declined'),
    failure_reason: z.string().optional().describe('present when the charge ended without the money moving'),
    created_by_key_id: z
      .string()
      .nullable()
      .optional()
      .describe('audit, shown to admin keys only: the API key that created the charge (null: the operator, or before audit)'),
    provider: wireProviderPaymentSchema.optional().describe('present for a charge through a provider (payment_method), absent otherwise'),
    next_action: nextActionSchema.describe(
      'while status is requires_action: what the payer must do (3-D Secure), the same as provider.next_action; null otherwise',
    ),
    created_at: timestamp,
    updated_at: timestamp,
  });
export type WireCharge = z.infer<typeof wireChargeSchema>;

/** `audit`: include who created it (admin keys only). */
export function chargeToWire(charge: Charge, options: { audit?: boolean } = {}): WireCharge {
  return {
    id: charge.id,
    object: 'charge',
    idempotency_key: charge.idempotencyKey,
    status: charge.status,
    amount: charge.amountMinor,
    amount_captured: charge.amountCapturedMinor,
    amount_refunded: charge.amountRefundedMinor,
    currency: charge.currency,
    order_id: charge.orderId,
    payer_account_id: charge.payerAccountId,
    ...(charge.provider ? { payment_method: charge.provider.paymentMethod } : {}),
    payee_account_id: charge.payeeAccountId,
    capture: charge.captureMode,
    description: charge.description,
    metadata: charge.metadata,
    ...(charge.declineCode ? { decline_code: charge.declineCode } : {}),
    ...(charge.failureReason ? { failure_reason: charge.failureReason } : {}),
    ...(options.audit && charge.createdByKeyId !== undefined ? { created_by_key_id: charge.createdByKeyId } : {}),
    ...(charge.provider ? { provider: providerPaymentToWire(charge.provider) } : {}),
    // As a Stripe PaymentIntent has it: a caller handling 3-D Secure need not know which provider asked.
    next_action: charge.status === 'requires_action' ? nextActionOf(charge.provider) : null,
    created_at: charge.createdAt,
    updated_at: charge.updatedAt,
  };
}

function nextActionOf(provider: ChargeProviderPayment | undefined): Record<string, unknown> | null {
  const action = provider?.nextAction;
  return typeof action === 'object' && action !== null && !Array.isArray(action) ? (action as Record<string, unknown>) : null;
}

export function providerPaymentToWire(provider: ChargeProviderPayment): z.infer<typeof wireProviderPaymentSchema> {
  return {
    name: provider.provider,
    payment_id: provider.paymentId,
    state: provider.state,
    next_action: provider.state === 'requires_action' ? nextActionOf(provider) : null,
    decline_code: provider.declineCode,
  };
}

export const wireAccountSchema = z
  .object({
    id: z.string(),
    object: z.literal('account'),
    currency: z.string(),
    posted: minorUnits.describe('settled balance'),
    pending: minorUnits.describe('held by charges that are reserved but not captured'),
    available: minorUnits.describe('posted - pending: what a new charge can use'),
    allow_overdraft: z.boolean(),
    created_at: timestamp,
  });
export type WireAccount = z.infer<typeof wireAccountSchema>;

export function accountToWire(account: Account): WireAccount {
  return {
    id: account.id,
    object: 'account',
    currency: account.currency,
    posted: account.postedMinor,
    pending: account.pendingMinor,
    available: account.availableMinor,
    allow_overdraft: account.allowOverdraft,
    created_at: account.createdAt,
  };
}

export const wireDepositSchema = z
  .object({
    id: z.string(),
    object: z.literal('deposit'),
    account_id: z.string(),
    amount: minorUnits,
    currency: z.string(),
    created_at: timestamp,
  });
export type WireDeposit = z.infer<typeof wireDepositSchema>;

export const wireRefundSchema = z.object({
  id: z.string(),
  object: z.literal('refund'),
  charge_id: z.string(),
  idempotency_key: z.string().describe('the refund key this refund was requested with'),
  amount: minorUnits.nullable().describe('null only while a refund of "the rest" is pending'),
  currency: z.string(),
  status: z.enum(refundStatuses),
  failure_code: z.enum(refundFailureCodes).optional().describe('present when status is failed'),
  provider_refund_id: z
    .string()
    .nullable()
    .describe(
      "a refund of a charge paid through a provider: the provider's own refund id (Stripe: re_…, not this refund's id) once the provider refunded it; null until then, and for a refund between ledger accounts",
    ),
  created_by_key_id: z
    .string()
    .nullable()
    .optional()
    .describe('audit, shown to admin keys only: the API key that made the refund (null: the operator, or before audit)'),
  created_at: timestamp,
});
export type WireRefund = z.infer<typeof wireRefundSchema>;

/** `audit`: include who made it (admin keys only). */
export function refundToWire(refund: Refund, options: { audit?: boolean } = {}): WireRefund {
  return {
    id: refund.id,
    object: 'refund',
    charge_id: refund.chargeId,
    idempotency_key: refund.refundKey,
    amount: refund.amountMinor,
    currency: refund.currency,
    status: refund.status,
    ...(refund.failureCode ? { failure_code: refund.failureCode } : {}),
    provider_refund_id: refund.providerRefundId ?? null,
    ...(options.audit && refund.createdByKeyId !== undefined ? { created_by_key_id: refund.createdByKeyId } : {}),
    created_at: refund.createdAt,
  };
}

/**
 * A page of a list, as Stripe's lists are: `url` is the list's path (without the query), which
 * Stripe's clients page on with `starting_after`/`ending_before` and the ids in `data`.
 */
export function listToWire<T>(data: T[], hasMore: boolean, url: string): { object: 'list'; data: T[]; has_more: boolean; url: string } {
  return { object: 'list', data, has_more: hasMore, url };
}
