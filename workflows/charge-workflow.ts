import {
  CancellationScope,
  allHandlersFinished,
  condition,
  isCancellation,
  patched,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { Charge } from '../src/domain/charge.js';
import { cancelReasons } from '../src/domain/refusals.js';
import {
  cancelChargeUpdate,
  captureChargeUpdate,
  chargeStatusQuery,
  providerEventSignal,
  type ChargeWorkflowInput,
} from './definitions.js';
import {
  defaultProviderVoidAlertAfterMs,
  holdDeadlineMs,
  payerActionLookEveryMs,
  providerStepFailure,
  providerSteps,
} from './provider-steps.js';
import { providerPayerEventsPatch, providerVoidAlertPatch, providerWaitsPatch } from './patches.js';
import { isOpen } from '../src/domain/charge-rules.js';
import { assertCancellable, assertCapturable, pendingCharge } from './charge-state.js';
import { chargeShapeOf } from './charge-generations.js';
import { exhaustedBudget, ledgerSteps } from './ledger-steps.js';
import { actionNeededSearchAttributes, chargeSearchAttributePairs, type IndexedChargeStatus } from './search-attributes.js';

/**
 * One charge, one execution per idempotency key: Try reserves the money, Confirm captures it,
 * Cancel releases it when the charge cannot or should not complete. The ledger makes every step
 * idempotent; this workflow decides which steps to run. Its result is the charge as the ledger
 * recorded it, identical for every caller of the key.
 */
export async function ChargeWorkflow(input: ChargeWorkflowInput): Promise<Charge> {
  // First, before the input is even read: which generation this execution is, and a start the
  // service did not make (by hand, through Temporal, past the API) fails here, final, before any
  // ledger step can run.
  const shape = chargeShapeOf(workflowInfo().workflowId, input);
  const { intent, policy } = input;
  const { tenant, idempotencyKey } = intent;

  let charge = pendingCharge(intent, workflowInfo().startTime);
  /** The status the search attributes last said (generations 4 and 5: pending, as the service started them). */
  let indexedStatus: IndexedChargeStatus = charge.status;
  /**
   * Generations 4 and 5: ChargeStatus follows every change of the charge. Refunds happen after the
   * charge closed, so a refunded charge still says succeeded there: the ledger is the source of
   * truth for those.
   */
  function index(): void {
    if (shape.statusIndexing !== 'every-change' || charge.status === indexedStatus) return;
    upsertSearchAttributes(chargeSearchAttributePairs(charge, charge.status));
    indexedStatus = charge.status;
  }
  /**
   * Generation 6: ChargeStatus is written only where a person may have to act, and stays as
   * written once the execution closes (searches pair it with ExecutionStatus = 'Running').
   */
  function indexActionNeeded(status: IndexedChargeStatus): void {
    if (shape.statusIndexing !== 'when-action-needed' || status === indexedStatus) return;
    upsertSearchAttributes(actionNeededSearchAttributes(charge, status));
    indexedStatus = status;
  }
  const ledger = ledgerSteps(policy, shape, { compensationRetrying: () => indexActionNeeded('cancelling') });
  let cancelRequested = false;
  /** undefined until a capture is asked for; null captures the whole hold. */
  let captureMinor: number | null | undefined;
  /** A provider charge's second participant (docs/providers.md); null for a charge between ledger accounts. */
  const provider = intent.request.paymentMethod ? providerSteps(policy) : null;
  /**
   * Provider charges with the marker: waits follow the ledger's hold expiry, and the payer's action
   * is looked for. Asked before the first await, as the generation's own patches are: a patch
   * checked after a local step resolved meets its marker at another point of a history whose first
   * task was completed early (a query on it), and replay fails.
   */
  const waitsFollowLedger = provider !== null && patched(providerWaitsPatch);
  /** Provider charges with the marker: a void that keeps failing is told (ChargeStatus, the cancel's answer), not waited out. */
  const voidAlerts = provider !== null && patched(providerVoidAlertPatch);
  /** The ledger's Cancel as it answered, once a compensation has written it (the void may still be retried). */
  let cancelledInLedger: Charge | null = null;
  /** True once the void has kept failing past its alert time: it goes on being retried, and waiting callers are answered. */
  let voidRetrying = false;
  /** Provider events received: each is a reason to look the payment up again, never the truth itself. */
  let providerEventsReceived = 0;

  setHandler(chargeStatusQuery, () => charge);
  setHandler(providerEventSignal, () => {
    providerEventsReceived += 1;
  });

  setHandler(
    cancelChargeUpdate,
    async () => {
      cancelRequested = true;
      await condition(() => !isOpen(charge) || voidRetrying);
      // The ledger cancelled and the provider's hold is still being voided: say so now (cancelling),
      // rather than keep the caller waiting on a void that may take an operator.
      if (isOpen(charge) && cancelledInLedger) return cancelledInLedger;
      if (charge.status === 'cancelled') return charge;
      assertCancellable(charge); // lost the race to Confirm or Try's decline: say so
      return charge;
    },
    { validator: () => assertCancellable(charge) },
  );

  setHandler(
    captureChargeUpdate,
    async ({ amountMinor }) => {
      // The first capture asked for decides the amount; `??=` would let a later one overwrite a
      // null (capture everything) before the workflow acted on it.
      if (captureMinor === undefined) captureMinor = amountMinor;
      await condition(() => !isOpen(charge) || voidRetrying);
      const settled = isOpen(charge) && cancelledInLedger ? cancelledInLedger : charge;
      assertCapturable(settled, amountMinor);
      return settled;
    },
    { validator: ({ amountMinor }) => assertCapturable(charge, amountMinor) },
  );

  // Compensation and the reads it relies on run even when the workflow itself is being cancelled
  // (Web UI, `temporal workflow cancel`): a cancelled workflow must not leave its hold behind.
  async function compensate(reason: string): Promise<Charge> {
    return CancellationScope.nonCancellable(async () => {
      try {
        const cancelled = (await ledger.cancelCharge(intent, reason)).charge;
        // The ledger's Cancel comes first: it is the record that stops a late authorize (which then
        // voids what it got), so the void after it cannot miss an authorization that lands later.
        if (!provider) return cancelled;
        if (!voidAlerts) return (await provider.void(tenant, idempotencyKey))?.charge ?? cancelled;
        cancelledInLedger = cancelled;
        try {
          const alertAfterMs = policy.providerVoidAlertAfterMs ?? defaultProviderVoidAlertAfterMs;
          return (await provider.voidUntilAlert(tenant, idempotencyKey, alertAfterMs))?.charge ?? cancelled;
        } catch (error) {
          if (providerStepFailure(error) !== 'budget') throw error;
          // Past its alert time: a person may have to look (ChargeStatus), waiting callers are
          // answered, and the void goes on until the provider takes it.
          voidRetrying = true;
          indexActionNeeded('cancelling');
          return (await provider.void(tenant, idempotencyKey))?.charge ?? cancelled;
        }
      } catch (error) {
        // Confirm did commit before its answer was lost: the money moved, so the charge succeeded.
        if (ledger.isRefusal(error, 'HoldAlreadyCaptured')) return readLedger();
        if (ledger.isIncurable(error, 'dataRejected')) return cancelledUnrecorded();
        throw error;
      }
    });
  }

  /**
   * Cancel could not even write its tombstone: the ledger rejects this charge's own values (a NUL
   * in a text field, say). Retrying cannot change that, and giving up is safe: Cancel sends the
   * intent's values that every Try of this charge sends too, into the same columns of the same
   * row, so no Try of this charge can have committed or ever will. There is no hold to release, and
   * no late Try that a tombstone would have to stop. The read (tenant and key only) checks that
   * reasoning instead of trusting it: a held row here would be a bug in it, and the plain Error
   * then fails the workflow task, retried until the bug is fixed, rather than abandon a hold.
   * Only a rejected value ends here: a rejected statement (class 42) or a system fault on Cancel
   * is retried until Cancel succeeds.
   */
  async function cancelledUnrecorded(): Promise<Charge> {
    let row: Awaited<ReturnType<typeof ledger.readCharge>>;
    try {
      row = await ledger.readCharge(tenant, idempotencyKey);
    } catch (error) {
      // The key itself is a value the ledger rejects: no row can be stored under it.
      if (!ledger.isIncurable(error, 'dataRejected')) throw error;
      row = null;
    }
    if (row?.holdState === 'TRIED') {
      throw new Error(`charge ${idempotencyKey} is held but Cancel's values are rejected by the ledger; this is a bug`);
    }
    if (row) return row.charge;
    // Nothing recorded: the workflow's result is the only record of this decision.
    return { ...charge, status: 'cancelled', failureReason: cancelReasons.ledgerRejectedData, updatedAt: new Date().toISOString() };
  }

  async function readLedger(): Promise<Charge> {
    const row = await CancellationScope.nonCancellable(() => ledger.readCharge(tenant, idempotencyKey));
    // A plain Error fails the workflow task, not the charge: it retries until the bug is fixed.
    if (!row) throw new Error(`ledger has no row for charge ${idempotencyKey} after it answered`);
    return row.charge;
  }

  /** Why a failed Try or Confirm is compensated; a Temporal cancellation is one more way of asking. */
  function reasonFor(error: unknown, otherwise: string): string {
    if (isCancellation(error)) return cancelReasons.requestedByCaller;
    const budget = exhaustedBudget(error);
    if (budget === 'try') return cancelReasons.tryBudgetExhausted;
    if (budget === 'confirm') return cancelReasons.confirmBudgetExhausted;
    if (ledger.isIncurable(error, 'dataRejected')) return cancelReasons.ledgerRejectedData;
    if (ledger.isIncurable(error, 'statementRejected')) return cancelReasons.ledgerRejectedStatement;
    return otherwise;
  }

  async function reserve(): Promise<Charge> {
    try {
      return (await ledger.tryCharge(intent, policy.holdTtlMs)).charge;
    } catch (error) {
      if (ledger.isRefusal(error, 'IdempotencyConflict')) throw error;
      // Cancelled before this Try (an earlier execution of the key, or a cancel that won the race).
      if (ledger.isRefusal(error, 'HoldCancelled')) return readLedger();
      return compensate(reasonFor(error, cancelReasons.ledgerUnavailable));
    }
  }

  async function capture(amountMinor: number | null): Promise<Charge> {
    if (provider) return captureAtProvider(amountMinor);
    try {
      return (await ledger.confirmCharge(tenant, idempotencyKey, amountMinor)).charge;
    } catch (error) {
      if (ledger.isRefusal(error, 'HoldCancelled')) return readLedger();
      return compensate(reasonFor(error, cancelReasons.confirmFailed));
    }
  }

  /** Provider charges: the provider captures, then the ledger confirms what it captured (one activity). */
  async function captureAtProvider(amountMinor: number | null): Promise<Charge> {
    try {
      return (await provider!.capture(tenant, idempotencyKey, amountMinor)).charge;
    } catch (error) {
      const failure = providerStepFailure(error);
      if (failure === 'hold_cancelled') return readLedger();
      if (failure === 'capture_refused') return compensate(cancelReasons.providerCaptureRefused);
      return compensate(reasonFor(error, cancelReasons.confirmFailed));
    }
  }

  /** Provider charges: the provider's hold on the payer's instrument, after the ledger's. */
  async function authorize(): Promise<Charge> {
    try {
      return (await provider!.authorize(intent)).charge;
    } catch (error) {
      const failure = providerStepFailure(error);
      if (failure === 'hold_cancelled') return readLedger();
      if (failure === 'authorize_rejected') return compensate(cancelReasons.providerRejected);
      // No connector for the provider on this worker: nothing was sent, so nothing can be held there.
      if (failure === 'not_configured') return compensate(cancelReasons.providerNotConfigured);
      if (isCancellation(error)) return compensate(cancelReasons.requestedByCaller);
      return compensate(cancelReasons.providerUnavailable);
    }
  }

  /**
   * Provider charges: the payer must act (3-D Secure); each provider event is a reason to look again.
   * `eventsBeforeAuthorize`: the provider events counted before the authorization was sent, so that
   * one that arrived while it was answering wakes the first wait (patched executions).
   */
  async function awaitPayerAction(followsLedger: boolean, eventsBeforeAuthorize: number): Promise<Charge> {
    const everyEventCounted = patched(providerPayerEventsPatch);
    indexActionNeeded('requires_action');
    const expiresAtMs = followsLedger ? holdDeadlineMs(charge, policy.holdTtlMs) : Date.now() + policy.holdTtlMs;
    /** Provider events already answered by a look at the payment (or that came before it existed). */
    let seen = everyEventCounted ? eventsBeforeAuthorize : providerEventsReceived;
    while (charge.status === 'requires_action') {
      if (!everyEventCounted) seen = providerEventsReceived;
      const remainingMs = expiresAtMs - Date.now();
      const waitMs = followsLedger ? Math.min(remainingMs, payerActionLookEveryMs(policy.holdTtlMs)) : remainingMs;
      const woke =
        waitMs > 0 &&
        (await condition(() => cancelRequested || providerEventsReceived !== seen, waitMs).catch((error: unknown) => {
          if (!isCancellation(error)) throw error;
          cancelRequested = true;
          return true;
        }));
      if (cancelRequested) return compensate(cancelReasons.requestedByCaller);
      if (!woke && !followsLedger) return compensate(cancelReasons.payerActionExpired);
      // An event, the periodic look, or the last look before giving up: the provider says where the
      // payment is. It answers for the events counted so far; one arriving during the look wakes the next wait.
      if (everyEventCounted) seen = providerEventsReceived;
      charge = (await provider!.refresh(intent)).charge;
      if (charge.status === 'requires_action' && !woke && Date.now() >= expiresAtMs) return compensate(cancelReasons.payerActionExpired);
    }
    return charge;
  }

  /** How long a manual hold waits for its capture: the TTL, or (provider charges, patched) until the ledger's hold expiry. */
  function captureWaitMs(followsLedger: boolean): number {
    return followsLedger ? holdDeadlineMs(charge, policy.holdTtlMs) - Date.now() : policy.holdTtlMs;
  }

  charge = await reserve();
  index();

  if (provider && charge.status === 'reserved') {
    // An event may arrive while the provider is still answering the authorization: it counts.
    const eventsBeforeAuthorize = providerEventsReceived;
    charge = cancelRequested ? await compensate(cancelReasons.requestedByCaller) : await authorize();
    if (charge.status === 'requires_action') charge = await awaitPayerAction(waitsFollowLedger, eventsBeforeAuthorize);
  }

  if (charge.status === 'reserved') {
    if (intent.request.captureMode === 'manual') {
      indexActionNeeded('reserved'); // a hold waiting for its capture
      const waitMs = captureWaitMs(waitsFollowLedger);
      const asked =
        (waitMs > 0 || cancelRequested || captureMinor !== undefined) &&
        (await condition(() => cancelRequested || captureMinor !== undefined, Math.max(1, waitMs)).catch((error: unknown) => {
          if (!isCancellation(error)) throw error;
          cancelRequested = true;
          return true;
        }));
      if (!asked) charge = await compensate(cancelReasons.holdExpired);
      else if (cancelRequested) charge = await compensate(cancelReasons.requestedByCaller);
      else charge = await capture(captureMinor ?? null);
    } else if (cancelRequested) {
      charge = await compensate(cancelReasons.requestedByCaller);
    } else {
      charge = await capture(null);
    }
  }

  if (isOpen(charge)) throw new Error(`charge ${idempotencyKey} would end while ${charge.status}; this is a bug`);
  index();
  await CancellationScope.nonCancellable(() => condition(allHandlersFinished));
  return charge;
}
