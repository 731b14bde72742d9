import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, inject, it } from 'vitest';
import { chargeWorkflowId } from '../../src/domain/charge.js';
import { resolveTemporalCliPath } from '../../src/stack/temporal-cli.js';
import { wireChargeSchema } from '../../src/service/wire.js';
import { apiKeyFor, send } from '../support/api.js';
import { balanceOf, captureCount, chargeBody, expectLedgerInvariants, expectReconciled, fundedTenant, newKey, useHarness, waitFor } from '../support/harness.js';

const h = useHarness();
const run = promisify(execFile);

function postCharge(apiUrl: string, apiKey: string, key: string, body: unknown) {
  return send(apiUrl, '/v1/charges', { method: 'POST', apiKey, body, headers: { 'idempotency-key': key } });
}

describe('on the cluster (Temporal server on PostgreSQL, 2 worker and 2 API processes)', () => {
  it('serves from two API processes of its own, each completing charges', async () => {
    const { apiUrls } = inject('cluster');
    expect(apiUrls).toHaveLength(2);
    expect(new Set(apiUrls).size).toBe(2);
    const tenant = await fundedTenant(h, { label: 'cluster-both', payerMinor: 10_000 });
    const apiKey = await apiKeyFor(h.pool, tenant);
    for (const [i, apiUrl] of apiUrls.entries()) {
      const key = newKey(`via-api-${i + 1}`);
      const response = await postCharge(apiUrl, apiKey, key, chargeBody({ amount: 1_000 }));
      expect(response.status, response.text).toBe(201);
      expect(wireChargeSchema.parse(response.body)).toMatchObject({ idempotency_key: key, status: 'succeeded', amount: 1_000 });
      expect(await captureCount(h.pool, tenant, key)).toBe(1);
    }
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 2 * 1_000);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('20 concurrent duplicates of one key, spread over both API processes: one debit, one body', async () => {
    const { apiUrls } = inject('cluster');
    const tenant = await fundedTenant(h, { label: 'cluster-dupes', payerMinor: 10_000 });
    const apiKey = await apiKeyFor(h.pool, tenant);
    const key = newKey('dupe');
    const body = chargeBody({ amount: 777 });

    const responses = await Promise.all(Array.from({ length: 20 }, (_, i) => postCharge(apiUrls[i % apiUrls.length]!, apiKey, key, body)));

    expect(responses.map((r) => r.status).sort()).toEqual([...Array(19).fill(200), 201]);
    expect(new Set(responses.map((r) => r.text)).size).toBe(1);
    expect(wireChargeSchema.parse(responses[0]!.body).status).toBe('succeeded');
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 777);
    await expectLedgerInvariants(h.pool, tenant);
    await expectReconciled(h, tenant);
  });

  it("finds a tenant's completed charges with `temporal workflow list --query \"ChargeTenant='…' AND ExecutionStatus='Completed'\"` (their outcome is the ledger's)", async () => {
    const { apiUrls } = inject('cluster');
    const tenant = await fundedTenant(h, { label: 'cluster-sa', payerMinor: 10_000 });
    const apiKey = await apiKeyFor(h.pool, tenant);
    const paid = [newKey('paid-a'), newKey('paid-b')];
    for (const [i, key] of paid.entries()) {
      expect((await postCharge(apiUrls[i]!, apiKey, key, chargeBody({ amount: 100 }))).status).toBe(201);
    }
    const manual = newKey('held');
    const held = await postCharge(apiUrls[0]!, apiKey, manual, chargeBody({ amount: 100, capture: 'manual' }));
    expect(wireChargeSchema.parse(held.body).status).toBe('reserved');

    const query = `ChargeTenant='${tenant}' AND ChargeAmountMinor=100 AND ExecutionStatus='Completed'`;
    const expected = paid.map((key) => chargeWorkflowId(tenant, key)).sort();
    let listed: string[] = [];
    // Visibility on SQL is written by the history service's visibility queue, after the workflow moves.
    await waitFor(
      async () => {
        const { stdout } = await run(
          resolveTemporalCliPath(),
          ['workflow', 'list', '--query', query, '--output', 'json', '--address', inject('stack').temporalAddress],
          { timeout: 30_000 },
        );
        const rows = stdout.trim() === '' ? [] : (JSON.parse(stdout) as Array<{ execution: { workflowId: string } }>);
        listed = rows.map((row) => row.execution.workflowId).sort();
        return JSON.stringify(listed) === JSON.stringify(expected);
      },
      { timeoutMs: 20_000, intervalMs: 250, what: query },
    ).catch(() => undefined); // the assertion below shows what the query found instead
    expect(listed).toEqual(expected);
    expect(listed).not.toContain(chargeWorkflowId(tenant, manual));
  });
});
