import { isCancellation } from '@temporalio/workflow';
import type { Charge } from '../src/domain/charge.js';
import { cancelReasons } from '../src/domain/refusals.js';
import { compensate, readLedger } from './charge-compensation.js';
import type { ChargeRun } from './charge-run.js';
import { exhaustedBudget } from './ledger-steps.js';
import { providerStepFailure } from './provider-steps.js';

// The charge's forward steps. Each answers the charge as its participant left it; a step that
// fails is compensated (charge-compensation.ts) with the reason it failed, and a step that finds
// the charge decided already (cancelled before it) answers the ledger's record.

/** Why a failed Try or Confirm is compensated; a Temporal cancellation is one more way of asking. */
function reasonFor(run: ChargeRun, error: unknown, otherwise: string): string {
  if (isCancellation(error)) return cancelReasons.requestedByCaller;
  const budget = exhaustedBudget(error);
  if (budget === 'try') return cancelReasons.tryBudgetExhausted;
  if (budget === 'confirm') return cancelReasons.confirmBudgetExhausted;
  if (run.ledger.isIncurable(error, 'dataRejected')) return cancelReasons.ledgerRejectedData;
  if (run.ledger.isIncurable(error, 'statementRejected')) return cancelReasons.ledgerRejectedStatement;
  return otherwise;
}

/** Try: the ledger holds the money (or declines the charge). */
export async function reserve(run: ChargeRun): Promise<Charge> {
  try {
    return (await run.ledger.tryCharge(run.intent, run.policy.holdTtlMs)).charge;
  } catch (error) {
    if (run.ledger.isRefusal(error, 'IdempotencyConflict')) throw error;
    // Cancelled before this Try (an earlier execution of the key, or a cancel that won the race).
    if (run.ledger.isRefusal(error, 'HoldCancelled')) return readLedger(run);
    return compensate(run, reasonFor(run, error, cancelReasons.ledgerUnavailable));
  }
}

/** Provider charges: the provider's hold on the payer's instrument, after the ledger's. */
export async function authorize(run: ChargeRun): Promise<Charge> {
  try {
    return (await run.provider!.authorize(run.intent)).charge;
  } catch (error) {
    const failure = providerStepFailure(error);
    if (failure === 'hold_cancelled') return readLedger(run);
    if (failure === 'authorize_rejected') return compensate(run, cancelReasons.providerRejected);
    // No connector for the provider on this worker: nothing was sent, so nothing can be held there.
    if (failure === 'not_configured') return compensate(run, cancelReasons.providerNotConfigured);
    if (isCancellation(error)) return compensate(run, cancelReasons.requestedByCaller);
    return compensate(run, cancelReasons.providerUnavailable);
  }
}

/** Confirm: the ledger captures the hold (all of it, or `amountMinor`); provider charges capture at the provider first. */
export async function capture(run: ChargeRun, amountMinor: number | null): Promise<Charge> {
  if (run.provider) return captureAtProvider(run, amountMinor);
  const { tenant, idempotencyKey } = run.intent;
  try {
    return (await run.ledger.confirmCharge(tenant, idempotencyKey, amountMinor)).charge;
  } catch (error) {
    if (run.ledger.isRefusal(error, 'HoldCancelled')) return readLedger(run);
    return compensate(run, reasonFor(run, error, cancelReasons.confirmFailed));
  }
}

/** Provider charges: the provider captures, then the ledger confirms what it captured (one activity). */
async function captureAtProvider(run: ChargeRun, amountMinor: number | null): Promise<Charge> {
  const { tenant, idempotencyKey } = run.intent;
  try {
    return (await run.provider!.capture(tenant, idempotencyKey, amountMinor)).charge;
  } catch (error) {
    const failure = providerStepFailure(error);
    if (failure === 'hold_cancelled') return readLedger(run);
    if (failure === 'capture_refused') return compensate(run, cancelReasons.providerCaptureRefused);
    return compensate(run, reasonFor(run, error, cancelReasons.confirmFailed));
  }
}
