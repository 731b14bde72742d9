import { ApplicationFailure } from '@temporalio/common';
import type { RefundIntent } from '../src/domain/refund.js';
import { IncurableLedgerError, LedgerRefusalError, classifyLedgerError } from '../src/ledger/errors.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import { refundCharge, type LedgerRefund } from '../src/ledger/refunds.js';

/** Fault-injection seams, as for the charge steps: `afterCommit` runs once the refund is committed. */
export interface RefundActivityHooks {
  beforeRefund?(intent: RefundIntent): void | Promise<void>;
  afterCommit?(intent: RefundIntent): void | Promise<void>;
}

export function createRefundActivities(pool: LedgerPool, hooks: RefundActivityHooks = {}) {
  return {
    /**
     * Idempotent per refund key: a retry after a lost answer finds the committed row and returns
     * it. A refused refund is an answer too (status failed); only unknown or uncaptured charges and
     * a reused refund key throw, as non-retryable failures.
     */
    async refundCharge(intent: RefundIntent): Promise<LedgerRefund> {
      await hooks.beforeRefund?.(intent);
      let result: LedgerRefund;
      try {
        result = await refundCharge(pool, intent);
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
      await hooks.afterCommit?.(intent);
      return result;
    },
  };
}

export type RefundActivities = ReturnType<typeof createRefundActivities>;
