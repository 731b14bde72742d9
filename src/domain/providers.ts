/**
 * A charge paid through a payment service provider (docs/providers.md): the names and states the
 * ledger, the workflow and every surface share. Pure data and functions: workflow code imports it.
 *
 * A provider charge names the payer's instrument at the provider (`payment_method`) instead of a
 * payer account. In the ledger its payer is the tenant's clearing account for that provider and
 * currency (`@provider/<provider>/<currency>`, a system account allowed to go negative): what the
 * provider owes the tenant for captured payments, so every capture still balances (clearing down,
 * payee up) and reconcile still holds.
 */

/** Providers a charge may name. One more is one connector file and one entry here. */
export const providerNames = ['stripe'] as const;
export type ProviderName = (typeof providerNames)[number];

/** Stripe's PaymentMethod ids are short; the bound keeps a hostile value out of the provider's request. */
export const paymentMethodIdMaxLength = 255;
/** A provider token: letters, digits and underscores (Stripe: `pm_…`, shared payment tokens `spt_…`). */
export const paymentMethodIdPattern = /^[A-Za-z0-9_]{1,255}$/;

/**
 * The page a payer comes back to after authenticating at the provider (3-D Secure by redirect), in
 * characters. Stripe takes up to 5,000; 2,048 is what browsers and proxies reliably carry in a URL,
 * and a bound keeps a hostile value out of the provider's request and the workflow's input.
 */
export const returnUrlMaxLength = 2_048;

/** The payer's instrument at the provider, as the caller named it. */
export interface ProviderPaymentMethod {
  provider: ProviderName;
  /** The provider's token for the instrument (Stripe: a PaymentMethod id such as `pm_card_visa`). */
  id: string;
}

/** The clearing account a provider charge's money comes from in the ledger. */
export function clearingAccountId(provider: ProviderName, currency: string): string {
  return `@provider/${provider}/${currency}`;
}

/**
 * The ids the ledger gives its system accounts: a provider's clearing account per currency
 * (`@provider/<provider>/<currency>`) and the outside world's per currency, the other side of every
 * deposit (`@external/<currency>`). No account a caller opens can have one (`@` and `/` are outside
 * the account id's characters), and the ledger refuses them as a charge's payer or payee; admin
 * keys and the operator may read their balances.
 */
export const systemAccountIdPattern = /^@(provider\/[a-z][a-z0-9_]{0,31}|external)\/[A-Z]{3}$/;

export function isSystemAccountId(id: string): boolean {
  return systemAccountIdPattern.test(id);
}

/**
 * Where the charge stands at the provider, as the ledger recorded it (charges.provider_state); null
 * while nothing was sent. Written in the same transaction as the ledger step each answer decides.
 */
export const providerPaymentStates = [
  /** Authorize was sent (its first send time is recorded); no answer recorded yet. */
  'authorizing',
  /** The payer must act (3-D Secure): `nextAction` says how. Nothing is held at the provider yet. */
  'requires_action',
  /** Held at the provider, waiting for capture or void. */
  'authorized',
  /** Captured at the provider; the ledger's Confirm moved the money in the same transaction. */
  'captured',
  /** Voided (or found not to exist) at the provider: nothing is held there. */
  'voided',
  /** The provider declined: nothing is held there, and the ledger's hold is released. */
  'declined',
] as const;
export type ProviderPaymentState = (typeof providerPaymentStates)[number];

/** A provider charge's provider side, as callers see it. */
export interface ChargeProviderPayment {
  provider: ProviderName;
  paymentMethod: string;
  /** The provider's payment id (Stripe: `pi_…`), once the provider answered. */
  paymentId: string | null;
  state: ProviderPaymentState | null;
  /** The provider's `next_action`, untouched, while the payer must act. */
  nextAction: unknown;
  /** The provider's exact decline code, beside the caller's `decline_code`. */
  declineCode: string | null;
}

/** `<charge id>:<step>`: the idempotency key of one step of one charge at the provider (src/providers/connector.ts). */
export type ProviderStepName = 'authorize' | 'capture' | 'void' | `refund:${string}`;
