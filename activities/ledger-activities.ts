import { ApplicationFailure } from '@temporalio/common';
import type { ChargeIntent } from '../src/domain/charge.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import type { LedgerCharge } from '../src/ledger/charges.js';
import { cancelHold, confirmHold, readCharge, tryHold } from '../src/ledger/charges.js';
import { LedgerRefusalError } from '../src/ledger/errors.js';

export type LedgerStep = 'try' | 'confirm' | 'cancel';

/**
 * Seams for fault-injection tests: `beforeStep` may throw to make a step fail; `afterCommit` runs
 * after the ledger committed but before the activity reports, where a crash is most dangerous.
 * Production wires none.
 */
export interface LedgerActivityHooks {
  beforeStep?(step: LedgerStep, tenant: string, idempotencyKey: string): void | Promise<void>;
  afterCommit?(step: LedgerStep, tenant: string, idempotencyKey: string): void | Promise<void>;
}

/** Ledger refusals are decisions: non-retryable, with the stable type the workflow branches on. */
function asActivityFailure(error: unknown): unknown {
  if (error instanceof LedgerRefusalError) {
    return ApplicationFailure.create({ type: error.type, message: error.message, nonRetryable: true });
  }
  return error; // a system fault: Temporal retries it
}

export function createLedgerActivities(pool: LedgerPool, hooks: LedgerActivityHooks = {}) {
  async function step<T>(name: LedgerStep, tenant: string, key: string, run: () => Promise<T>): Promise<T> {
    await hooks.beforeStep?.(name, tenant, key);
    let result: T;
    try {
      result = await run();
    } catch (error) {
      throw asActivityFailure(error);
    }
    await hooks.afterCommit?.(name, tenant, key);
    return result;
  }

  return {
    async tryCharge(intent: ChargeIntent, holdTtlMs: number): Promise<LedgerCharge> {
      return step('try', intent.tenant, intent.idempotencyKey, () => tryHold(pool, intent, holdTtlMs));
    },

    async confirmCharge(tenant: string, idempotencyKey: string, captureMinor: number | null): Promise<LedgerCharge> {
      return step('confirm', tenant, idempotencyKey, () => confirmHold(pool, tenant, idempotencyKey, captureMinor));
    },

    async cancelCharge(intent: ChargeIntent, reason: string): Promise<LedgerCharge> {
      return step('cancel', intent.tenant, intent.idempotencyKey, () => cancelHold(pool, intent, reason));
    },

    async readCharge(tenant: string, idempotencyKey: string): Promise<LedgerCharge | null> {
      return readCharge(pool, tenant, idempotencyKey);
    },
  };
}

export type LedgerActivities = ReturnType<typeof createLedgerActivities>;
