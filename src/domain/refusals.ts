import type { RefundFailureCode } from './refund.js';

/**
 * Stable names of the ledger's business refusals. They cross three boundaries (SQL error code,
 * activity failure type, client error), so each is spelled once here.
 * A refusal is a decision: retrying the same step returns the same refusal.
 */
export const ledgerRefusals = {
  /** Same (tenant, key) with a different request fingerprint. */
  idempotencyConflict: { type: 'IdempotencyConflict', sqlState: 'CGI01' },
  /** Try after Cancel (anti-hanging), Confirm after Cancel. */
  holdCancelled: { type: 'HoldCancelled', sqlState: 'CGH01' },
  /** Confirm with no Try before it. */
  holdNotTried: { type: 'HoldNotTried', sqlState: 'CGH02' },
  /** Confirm of a declined charge. */
  holdDeclined: { type: 'HoldDeclined', sqlState: 'CGH03' },
  /** Cancel after Confirm: the money moved, refund instead. */
  holdAlreadyCaptured: { type: 'HoldAlreadyCaptured', sqlState: 'CGH04' },
  /** Capture of more than is held, or of less than the minimum amount. */
  invalidCaptureAmount: { type: 'InvalidCaptureAmount', sqlState: 'CGA01' },
  /** Refund of a charge the ledger has never heard of. */
  chargeNotFound: { type: 'ChargeNotFound', sqlState: 'CGN02' },
  /** Refund of a charge that is not captured (declined, cancelled, or still held). */
  chargeNotCaptured: { type: 'ChargeNotCaptured', sqlState: 'CGR01' },
  /**
   * Refund whose acting key, read from the ledger's api_keys row, may not refund for the charge's
   * tenant: unknown, another tenant's, revoked, expired, a role that may not refund, or no key in
   * a tenant that has keys. Nothing recorded.
   */
  refundNotAuthorized: { type: 'RefundNotAuthorized', sqlState: 'CGK01' },
  /**
   * Confirm of a hold above the ledger's maximum amount, which no Try of this version reserves:
   * only a hold from before that rule. The workflow cancels it, so the money goes back to the payer.
   */
  chargeNotAllowed: { type: 'ChargeNotAllowed', sqlState: 'CGK02' },
  /** Cancel of a provider charge whose capture was sent and not yet answered: the money may be moving there. */
  providerCaptureInFlight: { type: 'ProviderCaptureInFlight', sqlState: 'CGH05' },
  /** A second provider payment for one charge: a duplicate at the provider, to be voided, never recorded. */
  providerPaymentConflict: { type: 'ProviderPaymentConflict', sqlState: 'CGP01' },
  /** A provider step on a charge that is not a provider charge, or not in the state the step needs. */
  providerStepNotAllowed: { type: 'ProviderStepNotAllowed', sqlState: 'CGP02' },
} as const;

export type LedgerRefusalName = keyof typeof ledgerRefusals;
export type LedgerRefusalType = (typeof ledgerRefusals)[LedgerRefusalName]['type'];

export function refusalBySqlState(sqlState: string): LedgerRefusalName | null {
  for (const [name, refusal] of Object.entries(ledgerRefusals)) {
    if (refusal.sqlState === sqlState) return name as LedgerRefusalName;
  }
  return null;
}

/**
 * Why Try declined a charge (`decline_code`): a decision recorded on the charge, the same answer
 * for every repetition of its key. The one list: the DeclineCode type and the wire enum derive
 * from it.
 */
export const declineCodes = [
  'insufficient_funds',
  'account_frozen',
  /** Payer or payee is not an ordinary account of the tenant (unknown, or a system account such as @external/USD). */
  'unknown_account',
  'currency_mismatch',
  /** The acting key's own row forbids it: largest charge, currency, payees, or its rolling 24 h total. */
  'mandate_exceeded',
  /** The amount is above the ledger's maximum, 10^12 minor units (docs/limits.md), whatever the caller's ceiling. */
  'amount_too_large',
  /** The acting key may not charge for the tenant: unknown, another tenant's, revoked, expired, or no key where the tenant has keys. */
  'key_not_authorized',
] as const;

/**
 * A provider's final refusal of a step (docs/providers.md): non-retryable activity failures the
 * charge workflow decides on. Unknown answers are never among them: those are retried with the same key.
 */
export const providerFailures = {
  /** Authorize refused as a request (invalid, an idempotency mismatch, authentication): the charge is cancelled. */
  authorizeRejected: { type: 'ProviderAuthorizeRejected' },
  /** Capture refused for good (the authorization was voided or expired at the provider): the charge is cancelled. */
  captureRefused: { type: 'ProviderCaptureRefused' },
  /**
   * Void refused with the payment still held or captured at the provider: a person must look
   * (reconcile --provider); the compensation keeps being retried and the charge is indexed as cancelling.
   */
  voidRefused: { type: 'ProviderVoidRefused' },
  /**
   * The charge names a provider this worker has no connector for (a provider name this program does
   * not know, or one whose credentials are not set here): authorize is refused before anything is
   * sent, and the charge is cancelled with `provider_not_configured` rather than retried for ever.
   */
  notConfigured: { type: 'ProviderNotConfigured' },
} as const;

/** Why a cancel or capture request is refused by a charge workflow (a 409 for HTTP callers). */
export const chargeStateRefusals = {
  alreadySucceeded: { type: 'ChargeAlreadySucceeded', hint: 'refund it instead' },
  alreadyCancelled: { type: 'ChargeAlreadyCancelled', hint: 'start a new charge with a new idempotency key' },
  declined: { type: 'ChargeDeclined', hint: 'nothing is held; start a new charge with a new idempotency key' },
  notManualCapture: { type: 'ChargeNotManualCapture', hint: 'only charges created with capture "manual" wait for a capture' },
  captureAmountInvalid: { type: 'CaptureAmountInvalid', hint: 'capture between 1 and the authorised amount' },
  captureAmountConflict: { type: 'CaptureAmountConflict', hint: 'the charge was already captured with another amount' },
  holdOrphaned: {
    type: 'ChargeHoldOrphaned',
    hint: 'the hold is being released and the money returned to the payer; start a new charge with a new idempotency key',
  },
  notCaptured: {
    type: 'ChargeNotCaptured',
    hint: 'only a captured charge can be refunded; capture it first, or cancel it to release the hold',
  },
} as const;

/** Why the ledger refused a refund (recorded: the same refund key always gets the same answer). */
export const refundRefusals = {
  exceeds_refundable: {
    type: 'RefundExceedsRefundable',
    hint: 'refund at most the captured amount not yet refunded',
  },
  insufficient_funds: {
    type: 'RefundInsufficientFunds',
    hint: 'the payee account cannot cover it; once it is funded, ask again with a new refund key',
  },
} as const;

export type ChargeStateRefusalName = keyof typeof chargeStateRefusals;

/**
 * `refundRefusals` has one refusal per refund failure code (src/domain/refund-outcomes.ts), and no
 * other: a code missing here, or a refusal for no code, fails to compile. A type, so that workflow
 * code (which imports this module) is unchanged by it.
 */
type Exactly<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type MustHold<Condition extends true> = Condition;
export type RefundRefusalsCoverFailureCodes = MustHold<Exactly<keyof typeof refundRefusals, RefundFailureCode>>;

/**
 * PostgreSQL errors that are not the ledger's refusals but that retrying cannot cure: the same
 * statement with the same values fails the same way every time. They are not decisions the
 * ledger recorded, so they get types of their own, never a refusal's.
 */
export const incurableLedgerFaults = {
  /**
   * Class 22 (data exception: a NUL in a text value, a number out of range) and class 23
   * (integrity constraint violation) raised by a step's own values. The step can never commit
   * with those values, whoever runs it and however often.
   */
  dataRejected: { type: 'LedgerDataRejected', sqlStateClasses: ['22', '23'] },
  /**
   * Class 42 (syntax error or access rule violation: a missing function, a missing privilege).
   * Only an operator can cure it, so Try and Confirm give up at once; Cancel and reads keep
   * retrying, because nothing can be concluded about the ledger from a statement that never ran.
   */
  statementRejected: { type: 'LedgerStatementRejected', sqlStateClasses: ['42'] },
} as const;

export type IncurableLedgerFaultName = keyof typeof incurableLedgerFaults;

export function incurableFaultBySqlState(sqlState: string): IncurableLedgerFaultName | null {
  if (sqlState.startsWith('CG')) return null; // the ledger's own refusals (and journal guards)
  const sqlStateClass = sqlState.slice(0, 2);
  for (const [name, fault] of Object.entries(incurableLedgerFaults)) {
    if ((fault.sqlStateClasses as readonly string[]).includes(sqlStateClass)) return name as IncurableLedgerFaultName;
  }
  return null;
}

/**
 * A local Try or Confirm that gave itself up because its next attempt could only start after its
 * budget: a system fault outlasted the budget (not a refusal, not incurable).
 */
export const stepBudgetSpent = { type: 'LedgerStepBudgetSpent' } as const;

/** Why a charge ended CANCELLED without the caller asking, stored as `failure_reason`. */
export const cancelReasons = {
  requestedByCaller: 'requested_by_caller',
  cancelledBeforeTry: 'cancelled_before_try',
  holdExpired: 'hold_expired',
  confirmFailed: 'confirm_failed',
  ledgerUnavailable: 'ledger_unavailable',
  /** Try kept failing on system faults for longer than TRY_BUDGET_MS. */
  tryBudgetExhausted: 'try_budget_exhausted',
  /** Confirm kept failing on system faults for longer than CONFIRM_BUDGET_MS. */
  confirmBudgetExhausted: 'confirm_budget_exhausted',
  /** The ledger rejected the charge's values (LedgerDataRejected): no attempt could ever commit. */
  ledgerRejectedData: 'ledger_rejected_data',
  /** The ledger rejected the statement itself (LedgerStatementRejected): an operator must fix it. */
  ledgerRejectedStatement: 'ledger_rejected_statement',
  /** The sweeper released a hold whose workflow closed without settling it. */
  holdOrphaned: 'hold_orphaned',
  /** The provider's authorize kept failing without an answer for its whole budget (a provider charge). */
  providerUnavailable: 'provider_unavailable',
  /** The provider refused authorize as a request (invalid payment method, authentication to the provider). */
  providerRejected: 'provider_rejected',
  /** The provider refused the capture for good (the authorization was voided or expired there). */
  providerCaptureRefused: 'provider_capture_refused',
  /** The payer did not complete the provider's required action (3-D Secure) within the hold's TTL. */
  payerActionExpired: 'payer_action_expired',
  /** The worker has no connector for the charge's provider: nothing was sent to any provider (docs/providers.md, Configuration). */
  providerNotConfigured: 'provider_not_configured',
} as const;
