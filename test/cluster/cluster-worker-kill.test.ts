import { temporal } from '@temporalio/proto';
import { describe, expect, inject, it } from 'vitest';
import { chargeWorkflowId } from '../../src/domain/charge.js';
import { wireChargeSchema } from '../../src/service/wire.js';
import { apiKeyFor, send } from '../support/api.js';
import { balanceOf, captureCount, chargeBody, expectLedgerInvariants, expectReconciled, fundedTenant, newKey, useHarness, waitFor } from '../support/harness.js';
import { isProcessAlive } from '../../src/support/child-process.js';

const h = useHarness();
const { EventType } = temporal.api.enums.v1;
/** What Temporal records when a task given to a worker that then died is handed to another one. */
const handedOverEvents = new Set([EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT, EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT]);

const chargeCount = 40;
const amountMinor = 100;
const payerMinor = 100_000;


describe('a worker process killed mid-run on the cluster', () => {
  it(`SIGKILL of one of the two worker processes while ${chargeCount} charges run: every charge completes on the other, each debited once, reconcile clean`, async () => {
    const { apiUrls, workers } = inject('cluster');
    expect(workers.length).toBeGreaterThanOrEqual(2);
    const victim = workers[0]!;
    expect(isProcessAlive(victim.pid)).toBe(true);
    const tenant = await fundedTenant(h, { label: 'cluster-kill', payerMinor });
    const apiKey = await apiKeyFor(h.pool, tenant);
    const keys = Array.from({ length: chargeCount }, (_, i) => newKey(`kill-${i}`));

    const responses = Promise.all(
      keys.map((key, i) =>
        send(apiUrls[i % apiUrls.length]!, '/v1/charges', { method: 'POST', apiKey, body: chargeBody({ amount: amountMinor }), headers: { 'idempotency-key': key } }),
      ),
    );
    // Mid-run: as soon as the first debit is posted, while the rest are in the workers' hands.
    const debitedAtKill = await waitFor(
      async () => {
        const debited = (payerMinor - (await balanceOf(h.pool, tenant, 'payer')).postedMinor) / amountMinor;
        return debited > 0 ? debited : null;
      },
      { timeoutMs: 60_000, intervalMs: 20, what: 'the first debit' },
    );
    process.kill(victim.pid, 'SIGKILL');
    await waitFor(async () => !isProcessAlive(victim.pid), { timeoutMs: 10_000, what: `${victim.name} to die` });
    // Otherwise the kill came after the run and proves nothing.
    expect(debitedAtKill).toBeLessThan(chargeCount);

    const answered = await responses;
    for (const [i, response] of answered.entries()) {
      // 201 when the outcome came within the API's wait budget; 202 while a retried task was still
      // waiting out its timeout on the dead worker: then the charge is read until it settles.
      expect([201, 202], response.text).toContain(response.status);
      if (response.status === 202) {
        await waitFor(
          async () => {
            const read = await send(apiUrls[0]!, `/v1/charges/${encodeURIComponent(keys[i]!)}`, { apiKey });
            return read.status === 200 && wireChargeSchema.parse(read.body).status === 'succeeded';
          },
          { timeoutMs: 60_000, intervalMs: 250, what: `charge ${keys[i]} to succeed` },
        );
      } else {
        expect(wireChargeSchema.parse(response.body).status).toBe('succeeded');
      }
    }
    for (const key of keys) expect(await captureCount(h.pool, tenant, key), key).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(payerMinor - chargeCount * amountMinor);
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(chargeCount * amountMinor);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
    // The killed worker held work when it died: some charges show a task of theirs timing out on it
    // and handed to the survivor. Without one, the kill would have proved nothing.
    let handedOver = 0;
    for (const key of keys) {
      const history = await h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).fetchHistory();
      if ((history.events ?? []).some((event) => event.eventType !== null && event.eventType !== undefined && handedOverEvents.has(event.eventType))) handedOver++;
    }
    expect(handedOver).toBeGreaterThan(0);
    // The survivor did the rest: it is still running.
    expect(isProcessAlive(workers[1]!.pid)).toBe(true);
  });
});
