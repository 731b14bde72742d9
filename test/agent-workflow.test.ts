import { workerDataConverter } from '../src/codec/data-converter.js';
import { testPayloadProtection } from './support/harness.js';
import { randomUUID } from 'node:crypto';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { Worker } from '@temporalio/worker';
import { describe, expect, inject, it } from 'vitest';
import type { OrderAgentInput, OrderAgentResult } from '../workflows/sample-agent-workflow.js';
import { chargeTaskQueue } from '../workflows/definitions.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  expectReconciled,
  fundedTenant,
  newKey,
  testPolicy,
  useHarness,
} from './support/harness.js';

const h = useHarness();

/** Event types as the history protobuf numbers them (temporal.api.enums.v1.EventType). */
const eventType = {
  workflowTaskCompleted: 6,
  startChildWorkflowExecutionInitiated: 29,
  startChildWorkflowExecutionFailed: 30,
} as const;

describe('an agent that is itself a workflow', () => {
  it('charges through child workflows; reset to its first task and replayed, it still debits once per order', async () => {
    const tenant = await fundedTenant(h, { label: 'agent' });
    const orders = [
      { key: newKey('order-a'), amount: 1_200 },
      { key: newKey('order-b'), amount: 800 },
    ];
    const input: OrderAgentInput = {
      intents: orders.map(({ key, amount }) => h.client.buildIntent(tenant, key, chargeBody({ amount }))),
      policy: testPolicy,
    };
    const agentId = `agent/${tenant}/${newKey('run')}`;
    const first = await h.temporal.workflow.start<(input: OrderAgentInput) => Promise<OrderAgentResult>>(
      'OrderAgentWorkflow',
      { taskQueue: chargeTaskQueue, workflowId: agentId, args: [input] },
    );
    const firstResult = await first.result();
    expect(firstResult.charges.map((c) => c.status)).toEqual(['succeeded', 'succeeded']);

    // Reset to the end of the first workflow task: the new run re-executes the agent from its
    // start, so it asks for both charges again.
    const firstHistory = await first.fetchHistory();
    const firstTask = firstHistory.events?.find((e) => e.eventType === eventType.workflowTaskCompleted);
    expect(firstTask?.eventId).toBeTruthy();
    const { runId: resetRunId } = await h.temporal.workflowService.resetWorkflowExecution({
      namespace: 'default',
      workflowExecution: { workflowId: agentId, runId: firstResult.runId },
      reason: 'test: an agent replayed from its start must not charge twice',
      workflowTaskFinishEventId: firstTask!.eventId,
      requestId: randomUUID(),
    });
    expect(resetRunId).toBeTruthy();
    expect(resetRunId).not.toBe(firstResult.runId);
    const reset = h.temporal.workflow.getHandle<(input: OrderAgentInput) => Promise<OrderAgentResult>>(
      agentId,
      resetRunId!,
      { followRuns: false },
    );
    const resetResult = await reset.result();

    // Same outcome, and Temporal refused to start the charges a second time.
    expect(resetResult.runId).toBe(resetRunId);
    expect(resetResult.charges).toEqual(firstResult.charges);
    const resetHistory = await reset.fetchHistory();
    const refusedStarts = resetHistory.events?.filter((e) => e.eventType === eventType.startChildWorkflowExecutionFailed);
    expect(refusedStarts).toHaveLength(orders.length);

    for (const { key } of orders) expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 8_000, pendingMinor: 0 });
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(2_000);

    // Both histories replay deterministically against the current workflow code.
    for (const history of [firstHistory, resetHistory]) {
      await Worker.runReplayHistory(
        { workflowBundle: { codePath: inject('stack').workflowBundlePath }, dataConverter: workerDataConverter(testPayloadProtection()) },
        history,
      );
    }
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it('an agent asking for a charge key that another request owns fails with IdempotencyConflict, charging nothing', async () => {
    const tenant = await fundedTenant(h, { label: 'agent-conflict' });
    const key = newKey('taken');
    expect((await h.client.charge(tenant, key, chargeBody({ amount: 500 }))).charge.status).toBe('succeeded');

    const input: OrderAgentInput = {
      intents: [h.client.buildIntent(tenant, key, chargeBody({ amount: 999 }))],
      policy: testPolicy,
    };
    const agent = await h.temporal.workflow.start('OrderAgentWorkflow', {
      taskQueue: chargeTaskQueue,
      workflowId: `agent/${tenant}/${newKey('run')}`,
      args: [input],
    });
    const error = (await agent.result().catch((e: unknown) => e)) as WorkflowFailedError;
    expect(error).toBeInstanceOf(WorkflowFailedError);
    expect(error.cause).toBeInstanceOf(ApplicationFailure);
    expect((error.cause as ApplicationFailure).type).toBe('IdempotencyConflict');
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(9_500);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });
});
