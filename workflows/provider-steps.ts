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

/**
 * How long before the hold's expiry a charge waiting for its payer looks the payment up once more
 * (provider-payer-look-before-capture-margin), so that a payer who authenticated but whose event was
 * lost is found while the hold still has time for the capture, not at the expiry itself, where a
 * manual hold has none left (docs/providers.md, "The look before the capture margin").
 *
 * Lower bound, `captureAttemptMs` (the policy's providerStepStartToCloseMs): one whole attempt of
 * the capture step, which is the provider's capture and the ledger's Confirm in one activity; the
 * look before it and the capture's first statement (after which the ledger's Cancel, and so the
 * hold sweeper, refuses until the capture's answer is recorded) take milliseconds when all is well.
 * Upper bound, half the hold TTL: a short hold still gives its payer most of its time before the
 * look, and the final look at the expiry still finds a payer who finished within the margin.
 * The upper bound wins when the two disagree.
 */
export function payerActionCaptureMarginMs(holdTtlMs: number, captureAttemptMs: number): number {
  return Math.max(0, Math.min(captureAttemptMs, Math.floor(holdTtlMs / 2)));
}

/** When the charge's hold expires, by the ledger: its recorded expiry, else Try's time plus the TTL. */
export function holdDeadlineMs(charge: Charge, holdTtlMs: number): number {
  const recorded = charge.holdExpiresAt === null ? Number.NaN : Date.parse(charge.holdExpiresAt);
  return Number.isFinite(recorded) ? recorded : Date.parse(charge.createdAt) + holdTtlMs;
}
