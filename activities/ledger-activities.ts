import { Context, type Info } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { ChargeIntent } from '../src/domain/charge.js';
import { stepBudgetSpent } from '../src/domain/refusals.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import type { LedgerCharge } from '../src/ledger/charges.js';
import { cancelHold, confirmHold, readCharge, tryHold } from '../src/ledger/charges.js';
import { tryProviderHold } from '../src/ledger/provider-charges.js';
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
export function asActivityFailure(thrown: unknown, call: LedgerCall): unknown {
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
 * When a step gives itself up: when the next attempt could only start after its deadline, this
 * attempt's system fault ends the step, as a non-retryable failure the workflow compensates at once.
 *
 * The deadline is the one the workflow passed (generation 6: workflow time at the step's first
 * scheduling plus its budget, so it holds across worker restarts and replays and needs no timer in
 * the history), else the local activity's own schedule-to-close, which is not a hard limit in the
 * SDK (the worker drops it when it fires between attempts) and restarts with the worker. Remote
 * activities without a deadline are left to the server, which enforces schedule-to-close itself.
 */
export function stepDeadlineMs(info: Info | null, deadlineEpochMs: number | undefined): number | null {
  if (deadlineEpochMs !== undefined) return deadlineEpochMs;
  if (!info?.isLocal || !info.scheduleToCloseTimeoutMs) return null;
  return info.scheduledTimestampMs + info.scheduleToCloseTimeoutMs;
}

export function budgetSpent(info: Info | null, deadlineMs: number, nowMs: number): boolean {
  const policy = info?.retryPolicy;
  // The worker hands the policy over in milliseconds (decompiled from the protobuf durations).
  const initialMs = typeof policy?.initialInterval === 'number' ? policy.initialInterval : 1_000;
  const maximumMs = typeof policy?.maximumInterval === 'number' ? policy.maximumInterval : initialMs * 100;
  const nextBackoffMs = Math.min(initialMs * (policy?.backoffCoefficient ?? 2) ** ((info?.attempt ?? 1) - 1), maximumMs);
  return nowMs + nextBackoffMs >= deadlineMs;
}

export function currentActivityInfo(): Info | null {
  try {
    return Context.current().info;
  } catch {
    return null; // called outside an activity (a test calling the step function directly)
  }
}

export function createLedgerActivities(pool: LedgerPool, hooks: LedgerActivityHooks = {}) {
  /**
   * One ledger step. `deadlineEpochMs`: when the step gives itself up on system faults (Cancel only
   * to tell the workflow it keeps failing: the workflow then calls it again without one).
   */
  async function step<T>(name: LedgerStep, tenant: string, key: string, run: () => Promise<T>, deadlineEpochMs?: number): Promise<T> {
    let result: T;
    try {
      // Inside the try: a fault a test injects here is classified as the same fault from SQL would be.
      await hooks.beforeStep?.(name, tenant, key);
      result = await run();
      // Also inside: an answer lost after the commit is a system fault like any other, and the
      // step's deadline ends it like any other.
      await hooks.afterCommit?.(name, tenant, key);
    } catch (error) {
      const failure = asActivityFailure(error, name);
      const retryable = !(failure instanceof ApplicationFailure && failure.nonRetryable);
      const info = currentActivityInfo();
      // Cancel has no budget of its own: only a deadline the workflow gave it ends its attempts.
      const deadlineMs = name === 'cancel' && deadlineEpochMs === undefined ? null : stepDeadlineMs(info, deadlineEpochMs);
      if (retryable && deadlineMs !== null && budgetSpent(info, deadlineMs, Date.now())) {
        throw ApplicationFailure.create({
          type: stepBudgetSpent.type,
          message: `${name} spent its budget; last fault: ${(error as Error).message}`,
          nonRetryable: true,
        });
      }
      throw failure;
    }
    return result;
  }

  return {
    async tryCharge(intent: ChargeIntent, holdTtlMs: number, deadlineEpochMs?: number): Promise<LedgerCharge> {
      // A provider charge reserves on its clearing account (ledger_provider_try); its key and mandate rules are Try's.
      const reserve = intent.request.paymentMethod ? tryProviderHold : tryHold;
      return step('try', intent.tenant, intent.idempotencyKey, () => reserve(pool, intent, holdTtlMs), deadlineEpochMs);
    },

    async confirmCharge(
      tenant: string,
      idempotencyKey: string,
      captureMinor: number | null,
      deadlineEpochMs?: number,
    ): Promise<LedgerCharge> {
      return step('confirm', tenant, idempotencyKey, () => confirmHold(pool, tenant, idempotencyKey, captureMinor), deadlineEpochMs);
    },

    async cancelCharge(intent: ChargeIntent, reason: string, deadlineEpochMs?: number): Promise<LedgerCharge> {
      return step('cancel', intent.tenant, intent.idempotencyKey, () => cancelHold(pool, intent, reason), deadlineEpochMs);
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
