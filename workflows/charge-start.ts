import { patched, workflowInfo } from '@temporalio/workflow';
import { chargeShapeOf } from './charge-generations.js';
import { indexActionNeeded } from './charge-indexing.js';
import { handleChargeMessages } from './charge-messages.js';
import type { ChargeRun } from './charge-run.js';
import { pendingCharge } from './charge-state.js';
import type { ChargeWorkflowInput } from './definitions.js';
import { ledgerSteps } from './ledger-steps.js';
import { providerWaitsPatch, providerVoidAlertPatch } from './patches.js';
import { providerSteps } from './provider-steps.js';

/**
 * A charge's first moments, before its first await: which generation this execution is, the
 * participants' steps, the charge before the ledger has seen it, and its message handlers. Every
 * patch asked here is asked at the same point of every history, in this order: a patch asked after
 * a local step resolved meets its marker at another point of a history whose first task was
 * completed early (a query on it), and replay fails.
 */
export function beginCharge(input: ChargeWorkflowInput): ChargeRun {
  // First, before the input is even read: which generation this execution is, and a start the
  // service did not make (by hand, through Temporal, past the API) fails here, final, before any
  // ledger step can run.
  const shape = chargeShapeOf(workflowInfo().workflowId, input);
  const { intent, policy } = input;
  const charge = pendingCharge(intent, workflowInfo().startTime);
  const ledger = ledgerSteps(policy, shape, { compensationRetrying: () => indexActionNeeded(run, 'cancelling') });
  const provider = intent.request.paymentMethod ? providerSteps(policy) : null;
  const run: ChargeRun = {
    intent,
    policy,
    shape,
    ledger,
    provider,
    // Provider charges only, so a ledger charge's history carries neither marker.
    waitsFollowLedger: provider !== null && patched(providerWaitsPatch),
    voidAlerts: provider !== null && patched(providerVoidAlertPatch),
    charge,
    indexedStatus: charge.status,
    cancelRequested: false,
    captureMinor: undefined,
    cancelledInLedger: null,
    voidRetrying: false,
    providerEventsReceived: 0,
  };
  handleChargeMessages(run);
  return run;
}
