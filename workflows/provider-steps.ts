import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { Charge } from '../src/domain/charge.js';
import type { ProviderActivities } from '../activities/provider-activities.js';
import type { ChargeIntent } from '../src/domain/charge.js';
import { ledgerRefusals, providerFailures, stepBudgetSpent } from '../src/domain/refusals.js';
import type { ChargePolicy } from './definitions.js';

/** ChargePolicy.providerAuthorizeBudgetMs when the policy does not say. */
export const defaultProviderAuthorizeBudgetMs = 120_000;
/** ChargePolicy.providerStepStartToCloseMs when the policy does not say: above the SDK's 3 attempts of 20 s. */
export const defaultProviderStepStartToCloseMs = 90_000;

const retryBackoff = { initialInterval: '500 milliseconds', backoffCoefficient: 2, maximumInterval: '30 seconds' } as const;

/** How a provider step ended, when it did not answer with the charge. */
export type ProviderStepFailure = 'budget' | 'authorize_rejected' | 'capture_refused' | 'hold_cancelled' | 'not_configured' | null;

/**
 * The provider participant's steps. Remote activities, not local ones like the ledger's: a provider
 * call may take seconds (the SDK retries attempts of up to 20 s), far past a workflow task, and
 * its attempts are worth seeing in the history. Authorize has a budget (its deadline, in workflow
 * time, which the activity enforces); capture and void have none: a capture once sent and a void
 * are driven until the provider answers, because giving up on either could leave money moved or
 * held with nobody to finish it.
 */
export function providerSteps(policy: ChargePolicy) {
  const startToCloseTimeout = policy.providerStepStartToCloseMs ?? defaultProviderStepStartToCloseMs;
  const steps = proxyActivities<ProviderActivities>({ startToCloseTimeout, retry: retryBackoff });
  const budgetMs = policy.providerAuthorizeBudgetMs ?? defaultProviderAuthorizeBudgetMs;
  return {
    authorize: (intent: ChargeIntent) => steps.authorizeAtProvider(intent, Date.now() + budgetMs),
    refresh: (intent: ChargeIntent) => steps.refreshProviderPayment(intent),
    capture: (tenant: string, key: string, captureMinor: number | null) => steps.captureAtProvider(tenant, key, captureMinor),
    void: (tenant: string, key: string) => steps.voidAtProvider(tenant, key),
    /** The void until `alertAfterMs` from now (workflow time); then it gives itself up as the budget spent. */
    voidUntilAlert: (tenant: string, key: string, alertAfterMs: number) => steps.voidAtProvider(tenant, key, Date.now() + alertAfterMs),
  };
}

/** What a failed provider step means for the charge; null: a failure the workflow does not decide on. */
export function providerStepFailure(error: unknown): ProviderStepFailure {
  const cause = error instanceof ActivityFailure ? error.cause : null;
  if (!(cause instanceof ApplicationFailure)) return null;
  switch (cause.type) {
    case stepBudgetSpent.type:
      return 'budget';
    case providerFailures.authorizeRejected.type:
      return 'authorize_rejected';
    case providerFailures.captureRefused.type:
      return 'capture_refused';
    case ledgerRefusals.holdCancelled.type:
      return 'hold_cancelled';
    case providerFailures.notConfigured.type:
      return 'not_configured';
    default:
      return null;
  }
}

/**
 * Provider charges started after this change wait by the ledger's clock and look for themselves:
 * - the payer's action and a manual hold's capture are awaited until the hold's own expiry in the
 *   ledger (`hold_expires_at`, or Try's time plus the TTL), not for a whole TTL counted from when the
 *   wait began: a slow authorization otherwise left a charge reserved past its ledger hold;
 * - while the payer must act, the workflow looks the payment up now and then and once more before
 *   giving up, so a lost provider event (the receiver answered 503 during a database restart and
 *   the sender gave up) no longer cancels a charge whose payer did authenticate.
 * Found by the chaos run with the provider in the loop (docs/chaos.md). Executions without the
 * marker (recorded histories v7) keep the waits they ran with. Checked at the workflow's start, before
 * any step, for provider charges only: a ledger charge's history is unchanged.
 */
export const providerWaitsPatch = 'provider-waits-follow-the-ledger';

/**
 * Provider charges started after this change tell the truth while a void keeps failing:
 * - the void is first given `providerVoidAlertAfterMs` (policy; 3 s when absent); past it, the
 *   charge is indexed ChargeStatus `cancelling` and the void goes on being retried until it is done,
 *   as before (a compensation never gives up);
 * - a cancel asked while the void is being retried is answered then, with the charge `cancelling`
 *   (the ledger has released the hold; the provider's hold is still being voided), instead of
 *   waiting for the void and timing out.
 * Executions without the marker (recorded histories up to v9) wait for the void as they ran.
 * Checked at the workflow's start, for provider charges only, as `providerWaitsPatch` is.
 */
export const providerVoidAlertPatch = 'provider-void-alerts';

/**
 * Provider charges started after this change miss no provider event while the payer must act: the
 * events are counted from before the authorization is sent, and again from before each look at the
 * payment. Without it, an event that arrived while the authorize step was still answering (the
 * payer authenticated at once), or while a look was running, was counted before the wait began and
 * never woke it: the charge stayed `requires_action` until the next periodic look
 * (`payerActionLookEveryMs`, 8.4 hours for a 7-day hold). The SDK runs signal handlers before it
 * resolves an activity's completion in the same activation, so an event racing the authorize
 * answer was always lost. Executions without the marker (recorded histories up to v9) wait as
 * they ran. Checked when the payer's wait begins, right after the authorize
 * step answered (a remote activity, so at a workflow task of its own), and only there: ledger
 * charges and provider charges that never wait for their payer carry no marker.
 */
export const providerPayerEventsPatch = 'provider-payer-events-counted-from-authorize';

/**
 * ChargePolicy.providerVoidAlertAfterMs when the policy does not say: three attempts (0.5 and 1 s
 * apart), so a waiting cancel is answered well inside the API's 5 s Temporal call timeout.
 */
export const defaultProviderVoidAlertAfterMs = 3_000;

/** How often a charge waiting for its payer looks the payment up, however many events arrived. */
export function payerActionLookEveryMs(holdTtlMs: number): number {
  // At most about twenty looks per hold, never more often than once a minute: a 7-day hold looks
  // every 8.4 hours (the provider's own redelivery covers days), a short one every minute.
  return Math.max(60_000, Math.floor(holdTtlMs / 20));
}

/** When the charge's hold expires, by the ledger: its recorded expiry, else Try's time plus the TTL. */
export function holdDeadlineMs(charge: Charge, holdTtlMs: number): number {
  const recorded = charge.holdExpiresAt === null ? Number.NaN : Date.parse(charge.holdExpiresAt);
  return Number.isFinite(recorded) ? recorded : Date.parse(charge.createdAt) + holdTtlMs;
}
