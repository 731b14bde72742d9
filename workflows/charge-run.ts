import { condition, isCancellation } from '@temporalio/workflow';
import type { Charge, ChargeIntent } from '../src/domain/charge.js';
import type { ChargeShape } from './charge-generations.js';
import type { ChargePolicy } from './definitions.js';
import type { ledgerSteps } from './ledger-steps.js';
import type { providerSteps } from './provider-steps.js';
import type { IndexedChargeStatus } from './search-attributes.js';

export type LedgerSteps = ReturnType<typeof ledgerSteps>;
export type ProviderSteps = ReturnType<typeof providerSteps>;

/**
 * One execution of ChargeWorkflow: what it was started with and decided at its start (read-only),
 * and what it has learned since (the charge, and what callers asked of it). The workflow's steps
 * and its message handlers share this one object, as they shared the workflow's locals before.
 */
export interface ChargeRun {
  readonly intent: ChargeIntent;
  readonly policy: ChargePolicy;
  /** Which generation this execution is (charge-generations.ts). */
  readonly shape: ChargeShape;
  readonly ledger: LedgerSteps;
  /** A provider charge's second participant (docs/providers.md); null for a charge between ledger accounts. */
  readonly provider: ProviderSteps | null;
  /** Provider charges with the marker: waits follow the ledger's hold expiry, and the payer's action is looked for. */
  readonly waitsFollowLedger: boolean;
  /** Provider charges with the marker: a void that keeps failing is told (ChargeStatus, the cancel's answer), not waited out. */
  readonly voidAlerts: boolean;

  /** The charge as this execution knows it: what the status query answers and the updates wait on. */
  charge: Charge;
  /** The status the search attributes last said (generations 4 and 5: pending, as the service started them). */
  indexedStatus: IndexedChargeStatus;
  cancelRequested: boolean;
  /** undefined until a capture is asked for; null captures the whole hold. */
  captureMinor: number | null | undefined;
  /** The ledger's Cancel as it answered, once a compensation has written it (the void may still be retried). */
  cancelledInLedger: Charge | null;
  /** True once the void has kept failing past its alert time: it goes on being retried, and waiting callers are answered. */
  voidRetrying: boolean;
  /** Provider events received: each is a reason to look the payment up again, never the truth itself. */
  providerEventsReceived: number;
}

/**
 * Waits until `until` holds or `timeoutMs` passes (false). The workflow being cancelled while it
 * waits (Web UI, `temporal workflow cancel`) counts as a cancel asked for.
 */
export async function waitOrCancel(run: ChargeRun, until: () => boolean, timeoutMs: number): Promise<boolean> {
  return condition(until, timeoutMs).catch((error: unknown) => {
    if (!isCancellation(error)) throw error;
    run.cancelRequested = true;
    return true;
  });
}
