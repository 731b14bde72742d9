/**
 * Every patch id the workflows ask `patched()` about, one place, each with what it versions
 * (docs/deploying-workflow-changes.md). An id is what a history's marker names: never rename one,
 * never reuse one. Where and in which order each is asked is the workflows' business, and does not
 * change either (charge-generations.ts for ChargeWorkflow's generations).
 *
 * ChargeWorkflow, oldest first. Generation 6 (`chargeGeneration6Patch`) is the one new executions
 * ask; the five before it are asked only by executions that do not carry its marker.
 */

/**
 * Ledger steps run as local activities: in the worker that runs the workflow task, inside that
 * task, their results recorded as markers. A charge then costs one workflow task instead of three
 * tasks and two activity round trips through the server (each a write to its persistence). What
 * makes the trade acceptable here:
 * - every step is one idempotent ledger transaction of a few milliseconds, far below the
 *   workflow task timeout, so a step never needs to outlive its task;
 * - a local activity is at-least-once per workflow task attempt (a worker that dies mid-task
 *   makes the next worker run the step again), which the ledger's truth table already absorbs;
 * - retries keep their budgets and backoff; beyond the local retry threshold the backoff becomes
 *   a durable timer, so Cancel's retry-until-done survives worker restarts as before;
 * - what is lost: activity-level visibility and routing (no ActivityTaskScheduled events; the
 *   steps cannot run on a separate activity fleet). The ledger is the record of money anyway.
 * Workflows started before this change (no patch marker in their history) keep remote activities.
 */
export const localLedgerStepsPatch = 'ledger-steps-as-local-activities';

/**
 * Try's and Confirm's budgets are enforced by a workflow timer, not only by the activities'
 * schedule-to-close timeout. A local activity's schedule-to-close is a one-shot timer inside the
 * worker's SDK core (@temporalio/core-bridge 1.24.0, local_activities.rs): when it fires while the
 * activity is backing off between attempts, which is where a step failing in milliseconds spends
 * nearly all its time, the timeout finds no attempt in flight, is dropped as untracked and never
 * fires again, so the step retries for ever. It is also measured from when this worker received
 * the step, so a workflow evicted and replayed elsewhere starts its budget afresh. The timer is
 * durable and in workflow time: the budget holds across worker restarts, and a step that finishes
 * within the workflow task cancels its timer before the command is sent, so a healthy charge's
 * history does not grow. The timer is started on the server with the task's first heartbeat
 * (every 80% of the workflow task timeout), so a step is given up at most that much (8 s by
 * default) after its budget. Workflows started before this change keep the activity timeout alone.
 *
 * The same patch makes the workflow recognise a local activity's failures: they reach workflow
 * code as the ApplicationFailure the activity threw, not wrapped in an ActivityFailure as a
 * remote activity's are, so until now a ledger refusal from a local step (Cancel finding the
 * charge captured, Try finding the key used by another request) was taken for a system fault.
 *
 * Generation 6 (charge-generations.ts) retired the timer: its start command reached the history
 * only when the task was completed while the step was unresolved in the workflow, which replay
 * cannot know. The step's deadline is now an argument the activity enforces itself.
 */
export const stepBudgetTimerPatch = 'ledger-step-budgets-and-local-failures';

/**
 * Generations 4 and 5 upsert ChargeStatus (with tenant, order id and payer) whenever the status
 * changes; executions started before it replay without the upserts. Generation 6
 * (charge-generations.ts) indexes ChargeStatus only where a person may have to act.
 */
export const chargeSearchAttributesPatch = 'charge-search-attributes';

/**
 * Anyone who can reach Temporal can start a ChargeWorkflow by hand (`temporal workflow start`),
 * past the API's keys and checks. The service derives a charge's workflow id, charge id and
 * fingerprint from (tenant, key, request); the workflow derives them again from its own input and
 * refuses a start where they disagree (tenant b's id over tenant a's intent, an amount changed after
 * fingerprinting) before any ledger step runs: no hold, no tombstone, no posting, and no retry.
 *
 * What it cannot refuse is a self-consistent forgery: the fingerprint is a hash, not a signature,
 * so someone who can start workflows can compute a matching one. Closing that door is the
 * transport's job (mTLS, network policy) and the payload codec's (docs/back-door.md).
 *
 * Executions started before this check (no marker in their history) replay without it.
 */
export const verifiedStartPatch = 'charge-start-verified';

/**
 * Generation 6 of ChargeWorkflow, one patch for everything it changed at once (one marker and one
 * TemporalChangeVersion upsert per charge, where calling the four older patches cost four of each):
 *
 * - Try's and Confirm's budgets are deadlines the step itself enforces (an argument in workflow
 *   time), not a workflow timer. The timer made a charge's history depend on wall-clock timing: its
 *   start command reached the history only when the workflow task was completed while the step was
 *   still unresolved in the workflow (a heartbeat, or a task completed early to answer a query),
 *   and on replay the SDK resolves a local activity whose marker sits in the same task at once, so
 *   the timer was cancelled before its command existed and the replay diverged
 *   (docs/deploying-workflow-changes.md, "The budget timer that would not replay").
 * - The input is trusted because the payload codec authenticated it (AES-256-GCM, the service's
 *   key); the workflow checks only that it names this workflow's own id, and ends at once when the
 *   codec could not decode it. The in-sandbox SHA-256 re-derivation of generation 5 is retired: a
 *   hash anyone can compute told a forgery from the service in no case.
 * - ChargeStatus is indexed only while a person may have to act: a manual hold waiting for its
 *   capture, and a compensation that keeps failing. Closed charges are read from the ledger.
 *
 * Executions started before (no marker of this patch in their history) replay the older patches
 * in the order they called them, so every recorded generation replays as it ran.
 */
export const chargeGeneration6Patch = 'charge-generation-6';

/** Provider charges (docs/providers.md), asked only when the input names a payment method. */

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
 * Provider charges started after this change look their payment up once more before the hold's
 * expiry, at `expiresAt - payerActionCaptureMarginMs` (workflows/provider-steps.ts: one attempt of
 * the capture step, at most half the hold TTL), and still once more at the expiry itself. Without
 * it, a payer who authenticated but whose provider event was lost was found only by the look at the
 * expiry: a manual hold then had no time left for its capture and was released `hold_expired` at
 * once, its authorization voided, though the payer had done everything asked; an automatic one was
 * captured only after its hold's time was up. A payer found authorized by this look goes on as an
 * event would have sent it: captured at once (automatic), or held for the caller's capture until
 * the expiry, the margin at least (manual). Executions
 * without the marker (recorded histories up to v12) look only at the expiry, as they ran. Asked
 * right after `provider-payer-events-counted-from-authorize`, where the payer's wait begins, and
 * only there: charges that never wait for their payer carry no marker and start no extra timer.
 */
export const providerCaptureMarginPatch = 'provider-payer-look-before-capture-margin';

/** RefundWorkflow. */

/**
 * Refunds check that their input names their own workflow id. Executions started before (no marker
 * in their history) replay without the check: a hand-made start recorded then would now be refused.
 */
export const refundStartCheckedPatch = 'refund-start-checked';
