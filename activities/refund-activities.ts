import { ApplicationFailure } from '@temporalio/common';
import { providerNames, type ProviderName } from '../src/domain/providers.js';
import type { RefundIntent } from '../src/domain/refund.js';
import { IncurableLedgerError, LedgerRefusalError, classifyLedgerError } from '../src/ledger/errors.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import {
  readRefundProviderSide,
  recordProviderRefunded,
  recordProviderRefundRejected,
  refundCharge,
  type LedgerRefund,
  type RefundProviderSide,
} from '../src/ledger/refunds.js';
import { providerIdempotencyKey, type RejectedOutcome } from '../src/providers/connector.js';
import type { ProviderConnectors } from '../src/providers/connectors.js';
import { refundOnce } from '../src/providers/refund-once.js';

/** Fault-injection seams, as for the charge steps: `afterCommit` runs once the refund is committed. */
export interface RefundActivityHooks {
  beforeRefund?(intent: RefundIntent): void | Promise<void>;
  afterCommit?(intent: RefundIntent): void | Promise<void>;
  /** The clock the provider's key retention is judged by (default Date.now); tests move it on. */
  nowMs?(): number;
}

/**
 * How a refund of a provider charge fails at the provider (docs/providers.md, Refunds). Only
 * `rejected` ends the refund workflow; the others are retried until they clear.
 */
export const providerRefundFailureTypes = {
  /** The provider refused the refund for good: the ledger gave money back that the provider did not. */
  rejected: 'ProviderRefundRejected',
  /** The provider may or may not have refunded: retried with the same key. */
  unknown: 'ProviderRefundUnknown',
  /** The refund cannot be sent yet: no connector for the provider, or our credentials refused. */
  unavailable: 'ProviderRefundUnavailable',
} as const;

export function createRefundActivities(pool: LedgerPool, hooks: RefundActivityHooks = {}, connectors: ProviderConnectors = {}) {
  const nowMs = hooks.nowMs ?? Date.now;
  return {
    /**
     * Idempotent per refund key: a retry after a lost answer finds the committed row and returns
     * it. A refused refund is an answer too (status failed); only unknown or uncaptured charges and
     * a reused refund key throw, as non-retryable failures. A succeeded refund of a provider charge
     * is then refunded at the provider too, under a key derived from the refund, so every retry is
     * the same request there and the payer is paid back once.
     */
    async refundCharge(intent: RefundIntent): Promise<LedgerRefund> {
      await hooks.beforeRefund?.(intent);
      const result = await ledgerStep(() => refundCharge(pool, intent));
      await hooks.afterCommit?.(intent);
      if (result.refund.status !== 'succeeded') return result;
      return refundAtProvider(pool, connectors, nowMs, intent, result);
    },
  };
}

export type RefundActivities = ReturnType<typeof createRefundActivities>;

/** A ledger call with its errors sorted into Temporal's terms. */
async function ledgerStep<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (thrown) {
    const error = classifyLedgerError(thrown);
    if (error instanceof LedgerRefusalError) {
      throw ApplicationFailure.create({ type: error.type, message: error.message, nonRetryable: true });
    }
    // Values the ledger rejects (class 22/23) would be rejected on every attempt: the refund
    // workflow fails at once instead of retrying for ever. A rejected statement (class 42) is
    // left to retry: an operator can repair it, and a refund holds nothing while it waits.
    if (error instanceof IncurableLedgerError && error.fault === 'dataRejected') {
      throw ApplicationFailure.create({ type: error.type, message: error.message, nonRetryable: true });
    }
    throw thrown; // a system fault: Temporal retries it
  }
}

/**
 * The provider side of a refund the ledger made. Runs on every attempt, after the ledger step has
 * returned the refund (new or replayed), so a retry after any failure comes back here and either
 * finds the provider's answer recorded or asks again with the same key.
 */
async function refundAtProvider(
  pool: LedgerPool,
  connectors: ProviderConnectors,
  nowMs: () => number,
  intent: RefundIntent,
  result: LedgerRefund,
): Promise<LedgerRefund> {
  const side = await readRefundProviderSide(pool, intent.tenant, intent.chargeKey, intent.refundKey);
  if (side === null) throw new Error(`refund ${intent.refundKey} of charge ${intent.chargeKey} was not found right after the ledger returned it`);
  if (side.provider === null) return result;
  const { refund } = result;
  if (side.providerRefundId !== null) return { ...result, refund: { ...refund, providerRefundId: side.providerRefundId } };
  if (side.providerRefundFailure !== null) throw rejectedFailure(intent, result, side, side.providerRefundFailure);

  const provider = side.provider;
  const connector = isProviderName(provider) ? connectors[provider] : undefined;
  if (!connector) {
    throw unavailable(`no ${provider} connector is configured in this worker; the ledger refunded ${describeRefund(intent, result)}, and the refund at ${provider} waits until a worker with ${provider} credentials picks it up (docs/providers.md, "Refunds")`);
  }
  if (side.paymentId === null || side.providerState !== 'captured' || refund.amountMinor === null) {
    // The ledger only confirms a provider charge with the provider's capture, so this is a row
    // somebody changed by hand: retried (visibly, in the workflow's pending activity) until repaired.
    throw unavailable(`charge ${refund.chargeId} is CONFIRMED in the ledger but its provider side is ${side.providerState ?? 'empty'} (payment ${side.paymentId ?? 'none'}); ${describeRefund(intent, result)} cannot be sent to ${provider}`);
  }

  const outcome = await refundOnce(
    connector,
    {
      paymentId: side.paymentId,
      amountMinor: refund.amountMinor,
      idempotencyKey: providerIdempotencyKey(refund.chargeId, `refund:${refund.id}`),
      reference: { tenant: intent.tenant, chargeId: refund.chargeId, refundId: refund.id },
    },
    { firstSentNotBeforeMs: side.refundCreatedAt.getTime(), nowMs: nowMs() },
  );
  switch (outcome.outcome) {
    case 'refunded':
      return ledgerStep(() => recordProviderRefunded(pool, intent, outcome.refund.id));
    case 'unknown':
      throw ApplicationFailure.retryable(
        `${provider} did not say whether it refunded ${describeRefund(intent, result)} (${outcome.reason}: ${outcome.detail}); retrying with the same key`,
        providerRefundFailureTypes.unknown,
      );
    case 'rejected': {
      // Our credentials were refused: the provider judged nothing about the refund, and fixing
      // the configuration is all it takes. Not recorded as the refund's failure.
      if (outcome.reason === 'authentication') {
        throw unavailable(`${provider} refused our credentials while refunding ${describeRefund(intent, result)} (${outcome.detail}); retrying until they are fixed`);
      }
      const failure = describeRejection(outcome);
      const recorded = await ledgerStep(() => recordProviderRefundRejected(pool, intent, failure));
      if (recorded.refund.providerRefundId !== undefined) return recorded;
      throw rejectedFailure(intent, result, side, recorded.refund.providerRefundFailure ?? failure);
    }
  }
}

function isProviderName(name: string): name is ProviderName {
  return (providerNames as readonly string[]).includes(name);
}

function unavailable(message: string): ApplicationFailure {
  return ApplicationFailure.retryable(message, providerRefundFailureTypes.unavailable);
}

function describeRefund(intent: RefundIntent, result: LedgerRefund): string {
  const { refund } = result;
  return `refund ${refund.id} (tenant ${intent.tenant}, charge key ${intent.chargeKey}, refund key ${intent.refundKey}) of ${refund.amountMinor ?? '?'} ${refund.currency} minor units`;
}

/** What is kept on the refund row: the provider's reason, its code, its words. */
function describeRejection(outcome: RejectedOutcome): string {
  return `${outcome.reason}${outcome.code ? ` (${outcome.code})` : ''}: ${outcome.detail}`;
}

/**
 * The refund workflow ends with this: an on-call engineer reads it in the workflow's failure,
 * and the same reason is on the refund row.
 */
function rejectedFailure(intent: RefundIntent, result: LedgerRefund, side: RefundProviderSide, failure: string): ApplicationFailure {
  return ApplicationFailure.create({
    type: providerRefundFailureTypes.rejected,
    nonRetryable: true,
    message:
      `${side.provider ?? 'the provider'} refused ${describeRefund(intent, result)} of payment ${side.paymentId ?? '(none)'}: ${failure}. ` +
      `The ledger has already moved the money back to the clearing account, but the payer was not paid back. ` +
      `Settle it by hand and record it (docs/providers.md, "Refunds").`,
    details: [{ refundId: result.refund.id, chargeId: result.refund.chargeId, paymentId: side.paymentId, failure }],
  });
}
