import type { Charge } from '../src/domain/charge.js';
import { cancelReasons } from '../src/domain/refusals.js';
import { compensate } from './charge-compensation.js';
import { indexActionNeeded } from './charge-indexing.js';
import { waitOrCancel, type ChargeRun } from './charge-run.js';
import { capture } from './charge-steps.js';
import { holdDeadlineMs } from './provider-steps.js';

/**
 * A manual-capture hold waits for its capture: captured when asked (the first amount asked for),
 * released when cancelled, or when nobody asked before the hold expires.
 */
export async function awaitCapture(run: ChargeRun): Promise<Charge> {
  indexActionNeeded(run, 'reserved'); // a hold waiting for its capture
  const waitMs = captureWaitMs(run);
  const asked =
    (waitMs > 0 || run.cancelRequested || run.captureMinor !== undefined) &&
    (await waitOrCancel(run, () => run.cancelRequested || run.captureMinor !== undefined, Math.max(1, waitMs)));
  if (!asked) return compensate(run, cancelReasons.holdExpired);
  if (run.cancelRequested) return compensate(run, cancelReasons.requestedByCaller);
  return capture(run, run.captureMinor ?? null);
}

/** How long a manual hold waits for its capture: the TTL, or (provider charges, patched) until the ledger's hold expiry. */
function captureWaitMs(run: ChargeRun): number {
  return run.waitsFollowLedger ? holdDeadlineMs(run.charge, run.policy.holdTtlMs) - Date.now() : run.policy.holdTtlMs;
}
