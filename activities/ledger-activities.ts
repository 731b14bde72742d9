import { Context, type Info } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { ChargeIntent } from '../src/domain/charge.js';
import { stepBudgetSpent } from '../src/domain/refusals.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import type { LedgerCharge } from '../src/ledger/charges.js';
import { cancelHold, confirmHold, readCharge, tryHold } from '../src/ledger/charges.js';
import { IncurableLedgerError, LedgerRefusalError, classifyLedgerError } from '../src/ledger/errors.js';

export type LedgerStep = 'try' | 'confirm' | 'cancel';
type LedgerCall = LedgerStep | 'read';

/**
 * Seams for fault-injection tests: `beforeStep` may throw to make a step fail; `afterCommit` runs
 * after the ledger committed but before the activity reports, where a crash is most dangerous.
 * Production wires none.
 */
export interface LedgerActivityHooks {
  beforeStep?(step: LedgerStep, tenant: string, idempotencyKey: string): void | Promise<void>;
  afterCommit?(step: LedgerStep, tenant: string, idempotencyKey: string): void | Promise<void>;
}

/**
 * Ledger refusals are decisions: non-retryable, with the stable type the workflow branches on.
 * Errors retrying cannot cure are non-retryable too, so a charge is decided at once instead of
 * spending its budget on attempts that must fail the same way; except a rejected statement
 * (class 42) on Cancel or a read: those tell nothing about the ledger's state, and a hold must be
 * released once an operator repairs the schema, so they stay system faults and are retried.
 */
function asActivityFailure(thrown: unknown, call: LedgerCall): unknown {
  const error = classifyLedgerError(thrown);
  if (error instanceof LedgerRefusalError) {
    return ApplicationFailure.create({ type: error.type, message: error.message, nonRetryable: true });
  }
  if (error instanceof IncurableLedgerError) {
    const curableByOperator = error.fault === 'statementRejected' && (call === 'cancel' || call === 'read');
    return ApplicationFailure.create({
      type: error.type,
      message: error.message,
      nonRetryable: !curableByOperator,
      details: [{ sqlState: error.sqlState }],
    });
  }
  return error; // a system fault: Temporal retries it
}

/**
 * A local step's schedule-to-close is not a hard limit in the SDK (see workflows/ledger-steps.ts:
 * the worker drops it when it fires between attempts), so the step enforces it itself: when the
 * next attempt could only start after the budget, this attempt's system fault ends the step, as a
 * non-retryable failure the workflow compensates at once. The workflow's durable budget timer stays
 * the guarantee (this one restarts with the worker); this one is the precise one. Remote
 * activities are left to the server, which enforces schedule-to-close itself.
 */
function localBudgetSpent(info: Info | null, nowMs: number): boolean {
  if (!info?.isLocal || !info.scheduleToCloseTimeoutMs) return false;
  const policy = info.retryPolicy;
  // The worker hands the policy over in milliseconds (decompiled from the protobuf durations).
  const initialMs = typeof policy?.initialInterval === 'number' ? policy.initialInterval : 1_000;
  const maximumMs = typeof policy?.maximumInterval === 'number' ? policy.maximumInterval : initialMs * 100;
  const nextBackoffMs = Math.min(initialMs * (policy?.backoffCoefficient ?? 2) ** (info.attempt - 1), maximumMs);
  return nowMs + nextBackoffMs >= info.scheduledTimestampMs + info.scheduleToCloseTimeoutMs;
}

function currentActivityInfo(): Info | null {
  try {
    return Context.current().info;
  } catch {
    return null; // called outside an activity (a test calling the step function directly)
  }
}

export function createLedgerActivities(pool: LedgerPool, hooks: LedgerActivityHooks = {}) {
  async function step<T>(name: LedgerStep, tenant: string, key: string, run: () => Promise<T>): Promise<T> {
    let result: T;
    try {
      // Inside the try: a fault a test injects here is classified as the same fault from SQL would be.
      await hooks.beforeStep?.(name, tenant, key);
      result = await run();
    } catch (error) {
      const failure = asActivityFailure(error, name);
      const retryable = !(failure instanceof ApplicationFailure && failure.nonRetryable);
      if (retryable && name !== 'cancel' && localBudgetSpent(currentActivityInfo(), Date.now())) {
        throw ApplicationFailure.create({
          type: stepBudgetSpent.type,
          message: `${name} spent its budget; last fault: ${(error as Error).message}`,
          nonRetryable: true,
        });
      }
      throw failure;
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
      try {
        return await readCharge(pool, tenant, idempotencyKey);
      } catch (error) {
        throw asActivityFailure(error, 'read');
      }
    },
  };
}

export type LedgerActivities = ReturnType<typeof createLedgerActivities>;
