/**
 * End to end on the shared worker: a ChargeWorkflow started by hand with an input the worker cannot
 * decode (plaintext, or encrypted under a key no worker holds) fails at once with UndecodableInput,
 * and nothing reaches the ledger. The codec hands the workflow the undecodable-payload value
 * (src/domain/undecodable-payload.ts); the workflow turns it into that failure before any step.
 */
import { randomBytes } from 'node:crypto';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import { parsePayloadKeyRing } from '../src/codec/key-ring.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { chargeTaskQueue } from '../workflows/definitions.js';
import { balanceOf, chargeBody, fundedTenant, newKey, tenantLedgerFootprint, testPolicy, useHarness } from './support/harness.js';
import { encryptedInputArgs, plaintextInputArgs, temporalCli } from './support/temporal-cli.js';

const h = useHarness();

/** The failure type the workflow ends an execution with when its input could not be decoded. */
const undecodableInputType = 'UndecodableInput';

const ledgerFootprint = (tenant: string) => tenantLedgerFootprint(h.pool, tenant);

async function expectUndecodableInput(label: string, inputArgs: (intent: unknown) => string[], reason: RegExp): Promise<void> {
  const tenant = await fundedTenant(h, { label });
  const key = newKey(label);
  const workflowId = chargeWorkflowId(tenant, key);
  const intent = h.client.buildIntent(tenant, key, chargeBody({ amount: 3_000 }));
  const before = await ledgerFootprint(tenant);
  const run = await temporalCli(
    'workflow', 'execute',
    '--type', 'ChargeWorkflow',
    '--workflow-id', workflowId,
    '--task-queue', chargeTaskQueue,
    ...inputArgs({ intent, policy: testPolicy }),
  );
  expect(run.code, run.output).not.toBe(0);

  const error = await h.temporal.workflow.getHandle(workflowId).result().then(() => null, (e: unknown) => e);
  expect(error).toBeInstanceOf(WorkflowFailedError);
  const cause = (error as WorkflowFailedError).cause;
  expect(cause).toBeInstanceOf(ApplicationFailure);
  expect((cause as ApplicationFailure).type).toBe(undecodableInputType);
  expect((cause as ApplicationFailure).nonRetryable).toBe(true);
  expect((cause as ApplicationFailure).message).toMatch(reason);
  expect((await h.temporal.workflow.getHandle(workflowId).describe()).status.name).toBe('FAILED');

  expect(await ledgerFootprint(tenant)).toEqual(before);
  const events = ((await h.temporal.workflow.getHandle(workflowId).fetchHistory()).events ?? []).map((event) => String(event.eventType));
  expect(events.filter((type) => /ACTIVITY|WORKFLOW_TASK_FAILED/.test(type))).toEqual([]);
}

describe('a start the worker cannot decode fails with UndecodableInput, touching nothing', () => {
  it('plaintext JSON from `temporal workflow execute`', async () => {
    await expectUndecodableInput('undecodable-plain', plaintextInputArgs, /plaintext refused/);
  });

  it('encrypted under a key id no worker holds', async () => {
    const foreign = parsePayloadKeyRing(`k-forger:${randomBytes(32).toString('base64')}`)!.current;
    await expectUndecodableInput('undecodable-key', (input) => encryptedInputArgs(input, foreign), /key k-forger/);
  });
});
