/**
 * The back door: anyone who can reach Temporal can start a ChargeWorkflow with the `temporal` CLI,
 * past the API's keys. The workflow re-derives its id, the charge id and the request fingerprint
 * from its own input and fails a start that disagrees with ForgedStart before any ledger step runs
 * (workflows/verify-start.ts, docs/back-door.md).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { Worker } from '@temporalio/worker';
import fc from 'fast-check';
import { describe, expect, inject, it } from 'vitest';
import { chargeWorkflowId, type ChargeIntent, type ChargeRequest } from '../src/domain/charge.js';
import { canonicalJson, chargeFingerprint, chargeIdFor } from '../src/domain/request-fingerprint.js';
import { workerDataConverter } from '../src/codec/data-converter.js';
import { resolveTemporalCliPath } from '../src/stack/temporal-cli.js';
import { chargeTaskQueue, type ChargeWorkflowInput } from '../workflows/definitions.js';
import { forgedStartType, startMismatches } from '../workflows/verify-start.js';
import { balanceOf, chargeBody, fundedTenant, newKey, providerIntent, testPayloadProtection, tenantLedgerFootprint, testPolicy, useHarness } from './support/harness.js';
import { encryptedInputArgs } from './support/temporal-cli.js';

const h = useHarness();

interface CliRun {
  code: number;
  output: string;
}

/** The real `temporal` binary against the test stack, as someone with network access would run it. */
function temporalCli(...args: string[]): Promise<CliRun> {
  return new Promise((resolve) => {
    execFile(
      resolveTemporalCliPath(),
      [...args, '--address', inject('stack').temporalAddress],
      { timeout: 60_000 },
      (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, output: `${stdout}\n${stderr}` }),
    );
  });
}

/**
 * `temporal workflow execute` of ChargeWorkflow on the production task queue: the measured attack,
 * by someone who also holds the payload key (a plaintext start is refused before the workflow
 * checks anything: test/undecodable-input.test.ts). The input is encrypted as the service's codec
 * does it and handed to the CLI as raw bytes with the encrypted payload's metadata.
 */
function executeByHand(workflowId: string, input: unknown): Promise<CliRun> {
  return temporalCli(
    'workflow', 'execute',
    '--type', 'ChargeWorkflow',
    '--workflow-id', workflowId,
    '--task-queue', chargeTaskQueue,
    ...encryptedInputArgs(input, testPayloadProtection().ring!.current),
  );
}

/** Replays an execution's history on this code, decoding its payloads as the worker does. */
async function replay(workflowId: string): Promise<void> {
  const history = await h.temporal.workflow.getHandle(workflowId).fetchHistory();
  await Worker.runReplayHistory(
    { workflowBundle: { codePath: inject('stack').workflowBundlePath }, dataConverter: workerDataConverter(testPayloadProtection()) },
    history,
    workflowId,
  );
}

/** The failure the execution ended with, as the client sees it. */
async function failureOf(workflowId: string): Promise<ApplicationFailure> {
  const error = await h.temporal.workflow.getHandle(workflowId).result().then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(WorkflowFailedError);
  const cause = (error as WorkflowFailedError).cause;
  expect(cause).toBeInstanceOf(ApplicationFailure);
  return cause as ApplicationFailure;
}

const ledgerFootprint = (tenant: string) => tenantLedgerFootprint(h.pool, tenant);

/** The event types of an execution: a refused start has no ledger step, local or remote, in it. */
async function eventTypes(workflowId: string): Promise<string[]> {
  const history = await h.temporal.workflow.getHandle(workflowId).fetchHistory();
  return (history.events ?? []).map((event) => String(event.eventType));
}

/** Local activities are recorded as markers; the only marker a refused start may carry is its patch. */
function ledgerStepEvents(types: string[]): string[] {
  return types.filter((type) => /ACTIVITY_TASK|ActivityTask/.test(type));
}

async function expectRefusedWithoutTrace(workflowId: string, tenants: string[], before: unknown[], mismatch: RegExp): Promise<void> {
  const failure = await failureOf(workflowId);
  expect(failure.type).toBe(forgedStartType);
  expect(failure.nonRetryable).toBe(true);
  expect(failure.message).toMatch(mismatch);
  const types = await eventTypes(workflowId);
  expect(ledgerStepEvents(types)).toEqual([]);
  // One marker, the patch's: no local activity (a ledger step) was recorded.
  expect(types.filter((type) => /MARKER_RECORDED|MarkerRecorded|^35$/.test(type)).length).toBeLessThanOrEqual(1);
  // Failed at once, in its first workflow task: no retry, no compensation loop.
  expect(types.filter((type) => /WORKFLOW_TASK_FAILED|WorkflowTaskFailed/.test(type))).toEqual([]);
  const after = await Promise.all(tenants.map((tenant) => ledgerFootprint(tenant)));
  expect(after).toEqual(before);
}

describe('a ChargeWorkflow started by hand with the temporal CLI', () => {
  it("tenant b's workflow id over tenant a's intent fails with ForgedStart; nothing reaches the ledger", async () => {
    const a = await fundedTenant(h, { label: 'forged-a' });
    const b = await fundedTenant(h, { label: 'forged-b' });
    const key = newKey('forged');
    const intent = h.client.buildIntent(a, key, chargeBody({ amount: 4_000 }));
    const before = await Promise.all([a, b].map((tenant) => ledgerFootprint(tenant)));

    const forgedId = chargeWorkflowId(b, key);
    const run = await executeByHand(forgedId, { intent, policy: testPolicy } satisfies ChargeWorkflowInput);
    expect(run.code).not.toBe(0);
    expect(run.output).toContain('refused a charge start the service did not make');

    await expectRefusedWithoutTrace(forgedId, [a, b], before, /workflow id .* is not .*charge\/t-forged-a/);
    // The refusal replays on this code (a query of the closed execution replays it): it is deterministic.
    await replay(forgedId);
  });

  it("a genuine charge's input started again under another key's workflow id fails with ForgedStart; nothing reaches the ledger", async () => {
    // What the workflow itself can still check once the codec authenticates inputs: that the input
    // names this very execution, so a captured input cannot be replayed under another id.
    const a = await fundedTenant(h, { label: 'forged-rebound' });
    const key = newKey('captured');
    const intent = h.client.buildIntent(a, key, chargeBody({ amount: 1_000 }));
    const otherId = chargeWorkflowId(a, newKey('elsewhere'));
    const before = [await ledgerFootprint(a)];

    const run = await executeByHand(otherId, { intent, policy: testPolicy });
    expect(run.code).not.toBe(0);

    await expectRefusedWithoutTrace(otherId, [a], before, /is not "charge\//);
  });

  it('an input that is not a charge at all fails with ForgedStart at once, not a workflow task retried for ever', async () => {
    const a = await fundedTenant(h, { label: 'forged-shape' });
    const key = newKey('shape');
    const before = [await ledgerFootprint(a)];
    const run = await executeByHand(chargeWorkflowId(a, key), { intent: { tenant: a, idempotencyKey: key } });
    expect(run.code).not.toBe(0);
    await expectRefusedWithoutTrace(chargeWorkflowId(a, key), [a], before, /intent\.chargeId or intent\.fingerprint is not a string/);
  });

  it('a provider name this program does not know fails with ForgedStart; no clearing account is made for it and nothing is held', async () => {
    // Measured: a forged start naming provider "evil" made @provider/evil/USD and held money on it.
    const a = await fundedTenant(h, { label: 'forged-provider' });
    const key = newKey('evil');
    const genuine = providerIntent(a, key, 'pm_card_visa');
    const request = { ...genuine.request, payerAccountId: '@provider/evil/USD', paymentMethod: { provider: 'evil', id: 'pm_card_visa' } };
    const intent = { ...genuine, request, fingerprint: chargeFingerprint(request as ChargeIntent['request'], 2) };
    const before = [await ledgerFootprint(a)];

    const run = await executeByHand(chargeWorkflowId(a, key), { intent, policy: testPolicy });
    expect(run.code).not.toBe(0);
    await expectRefusedWithoutTrace(chargeWorkflowId(a, key), [a], before, /intent\.request\.paymentMethod\.provider is not one of stripe/);
    const accounts = await h.pool.query('SELECT id FROM accounts WHERE tenant = $1 AND id LIKE $2', [a, '@provider/%']);
    expect(accounts.rows).toEqual([]);
  });

  it('a genuine charge through the service still succeeds, and so does a start carrying a v1 fingerprint (as older versions made)', async () => {
    const a = await fundedTenant(h, { label: 'genuine' });
    const { charge } = await h.client.charge(a, newKey('genuine'), chargeBody({ amount: 2_500 }));
    expect(charge.status).toBe('succeeded');

    const key = newKey('v1');
    const current = h.client.buildIntent(a, key, chargeBody({ amount: 500 }));
    const v1: ChargeIntent = { ...current, fingerprint: chargeFingerprint(current.request, 1) };
    expect(v1.fingerprint).toMatch(/^[0-9a-f]{64}$/);
    const handle = await h.temporal.workflow.start('ChargeWorkflow', {
      taskQueue: chargeTaskQueue,
      workflowId: chargeWorkflowId(a, key),
      args: [{ intent: v1, policy: testPolicy }],
      memo: { fingerprint: v1.fingerprint },
      workflowIdReusePolicy: 'REJECT_DUPLICATE',
    });
    expect(await handle.result()).toMatchObject({ status: 'succeeded', amountCapturedMinor: 500 });
    expect(await balanceOf(h.pool, a, 'payer')).toMatchObject({ postedMinor: 10_000 - 2_500 - 500, pendingMinor: 0 });
  });
});

describe('what the workflow re-derives from its input', () => {
  const request: ChargeRequest = {
    orderId: 'o-1',
    payerAccountId: 'payer',
    payeeAccountId: 'payee',
    amountMinor: 1_000,
    currency: 'USD',
    captureMode: 'automatic',
    description: null,
    metadata: null,
  };
  const intentOf = (tenant: string, key: string, fingerprint: string): ChargeIntent => ({
    tenant,
    idempotencyKey: key,
    chargeId: chargeIdFor(tenant, key),
    fingerprint,
    request,
  });
  const input = (intent: ChargeIntent): ChargeWorkflowInput => ({ intent, policy: testPolicy });

  it('accepts every fingerprint version the service has produced, and names each mismatch', () => {
    for (const version of [1, 2] as const) {
      expect(startMismatches('charge/t/k', input(intentOf('t', 'k', chargeFingerprint(request, version))))).toEqual([]);
    }
    const good = intentOf('t', 'k', chargeFingerprint(request));
    expect(startMismatches('charge/u/k', input(good))).toEqual([expect.stringMatching(/^workflow id "charge\/u\/k" is not "charge\/t\/k"/)]);
    expect(startMismatches('charge/t/k', input({ ...good, chargeId: chargeIdFor('u', 'k') }))).toEqual([expect.stringMatching(/^intent\.chargeId/)]);
    expect(startMismatches('charge/t/k', input({ ...good, fingerprint: `v3:${'0'.repeat(64)}` }))).toEqual([
      'intent.fingerprint is not a fingerprint of any version',
    ]);
    // A v1 fingerprint over a changed request: checked under v1's own definition.
    const v1 = { ...intentOf('t', 'k', chargeFingerprint(request, 1)), request: { ...request, currency: 'EUR' } };
    expect(startMismatches('charge/t/k', input(v1))).toEqual(['intent.fingerprint is not the v1 fingerprint of intent.request']);
    for (const broken of [null, [], 'x', { intent: good }, { intent: { ...good, request: { ...request, amountMinor: '1000' } }, policy: testPolicy }]) {
      expect(startMismatches('charge/t/k', broken)).toHaveLength(1);
    }
    for (const retryMaxMs of [0, -1, 1.5, '500']) {
      expect(startMismatches('charge/t/k', { intent: good, policy: { ...testPolicy, ledgerRetryMaxIntervalMs: retryMaxMs } })).toEqual([
        'policy.ledgerRetryMaxIntervalMs is not a positive integer',
      ]);
    }
    expect(startMismatches('charge/t/k', { intent: good, policy: { ...testPolicy, ledgerRetryMaxIntervalMs: 500 } })).toEqual([]);
  });

  it('the pure-JavaScript SHA-256 the workflow uses gives the fingerprints node:crypto gives', () => {
    const text = fc.string({ unit: 'grapheme', maxLength: 40 });
    fc.assert(
      fc.property(text, text, fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), fc.option(fc.dictionary(text, text), { nil: null }), (orderId, payer, amountMinor, metadata) => {
        const r: ChargeRequest = { ...request, orderId, payerAccountId: payer, amountMinor, metadata };
        const nodeHex = createHash('sha256').update(canonicalJson({
          order_id: orderId, payer_account_id: payer, payee_account_id: 'payee', amount: amountMinor,
          currency: 'USD', capture: 'automatic', ...(metadata !== null ? { metadata } : {}),
        }), 'utf8').digest('hex');
        expect(chargeFingerprint(r)).toBe(`v2:${nodeHex}`);
      }),
      { numRuns: 300 },
    );
  });
});
