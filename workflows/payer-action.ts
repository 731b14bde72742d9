import { patched } from '@temporalio/workflow';
import type { Charge } from '../src/domain/charge.js';
import { cancelReasons } from '../src/domain/refusals.js';
import { compensate } from './charge-compensation.js';
import { indexActionNeeded } from './charge-indexing.js';
import { waitOrCancel, type ChargeRun } from './charge-run.js';
import { providerCaptureMarginPatch, providerPayerEventsPatch } from './patches.js';
import {
  defaultProviderStepStartToCloseMs,
  holdDeadlineMs,
  payerActionCaptureMarginMs,
  payerActionLookEveryMs,
} from './provider-steps.js';

/**
 * Provider charges: the payer must act (3-D Secure); each provider event is a reason to look again.
 * `eventsBeforeAuthorize`: the provider events counted before the authorization was sent, so that
 * one that arrived while it was answering wakes the first wait (patched executions).
 */
export async function awaitPayerAction(run: ChargeRun, eventsBeforeAuthorize: number): Promise<Charge> {
  const everyEventCounted = patched(providerPayerEventsPatch);
  const { policy, waitsFollowLedger: followsLedger } = run;
  indexActionNeeded(run, 'requires_action');
  const expiresAtMs = followsLedger ? holdDeadlineMs(run.charge, policy.holdTtlMs) : Date.now() + policy.holdTtlMs;
  // The last look that still leaves the capture its time before the hold expires (patched
  // executions); unpatched ones look last at the expiry itself, as they ran.
  const marginLooks = followsLedger && patched(providerCaptureMarginPatch);
  const captureAttemptMs = policy.providerStepStartToCloseMs ?? defaultProviderStepStartToCloseMs;
  const marginLookAtMs = marginLooks ? expiresAtMs - payerActionCaptureMarginMs(policy.holdTtlMs, captureAttemptMs) : expiresAtMs;
  /** Provider events already answered by a look at the payment (or that came before it existed). */
  let seen = everyEventCounted ? eventsBeforeAuthorize : run.providerEventsReceived;
  while (run.charge.status === 'requires_action') {
    if (!everyEventCounted) seen = run.providerEventsReceived;
    // Until the margin look, wait for it; after it, for the final look at the expiry.
    const nextDeadlineMs = Date.now() < marginLookAtMs ? marginLookAtMs : expiresAtMs;
    const remainingMs = nextDeadlineMs - Date.now();
    const waitMs = followsLedger ? Math.min(remainingMs, payerActionLookEveryMs(policy.holdTtlMs)) : remainingMs;
    const woke = waitMs > 0 && (await waitOrCancel(run, () => run.cancelRequested || run.providerEventsReceived !== seen, waitMs));
    if (run.cancelRequested) return compensate(run, cancelReasons.requestedByCaller);
    if (!woke && !followsLedger) return compensate(run, cancelReasons.payerActionExpired);
    // An event, the periodic look, the margin look, or the last look before giving up: the provider
    // says where the payment is (found authorized, the charge goes on to its capture at once). It
    // answers for the events counted so far; one arriving during the look wakes the next wait.
    if (everyEventCounted) seen = run.providerEventsReceived;
    run.charge = (await run.provider!.refresh(run.intent)).charge;
    if (run.charge.status === 'requires_action' && !woke && Date.now() >= expiresAtMs) {
      return compensate(run, cancelReasons.payerActionExpired);
    }
  }
  return run.charge;
}
