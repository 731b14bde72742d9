import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { describe, expect, it } from 'vitest';
import { IdempotencyConflictError, ValidationError } from '../src/domain/errors.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { deposit } from '../src/ledger/accounts.js';
import { countLedger } from '../src/ledger/reports.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  fundedTenant,
  newKey,
  newTenant,
  openAccount,
  startTestWorker,
  useHarness,
  waitFor,
  testDataConverter,
} from './support/harness.js';
import { startChargeguardDevServer } from '../src/runtime/local-stack.js';

const h = useHarness();

async function countExecutions(workflowId: string): Promise<number> {
  let n = 0;
  for await (const _ of h.temporal.workflow.list({ query: `WorkflowId = '${workflowId}'` })) n++;
  return n;
}

describe('a charge runs exactly once per idempotency key', () => {
  it('the same key started 10 times in a row: one execution, one debit, identical results', async () => {
    const tenant = await fundedTenant(h, { label: 'seq' });
    const key = newKey();
    const body = chargeBody({ amount: 2_500 });

    const replies = [];
    for (let i = 0; i < 10; i++) replies.push(await h.client.charge(tenant, key, body));

    expect(replies[0]!.replayed).toBe(false);
    expect(replies.slice(1).every((r) => r.replayed)).toBe(true);
    expect(replies.every((r) => r.completed)).toBe(true);
    for (const reply of replies) expect(reply.charge).toEqual(replies[0]!.charge);
    expect(replies[0]!.charge.status).toBe('succeeded');
    expect(replies[0]!.charge.amountCapturedMinor).toBe(2_500);

    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(7_500);
    expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(2_500);
    await waitFor(async () => (await countExecutions(chargeWorkflowId(tenant, key))) === 1, {
      what: 'the visibility store to list the one execution',
    });
    expect(await countExecutions(chargeWorkflowId(tenant, key))).toBe(1);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('50 concurrent starts of the same key from separate clients: one debit, 50 identical results', async () => {
    const tenant = await fundedTenant(h, { label: 'conc', payerMinor: 100_000 });
    const key = newKey();
    const body = chargeBody({ amount: 1_234 });

    const connections = await Promise.all(
      Array.from({ length: 50 }, () => Connection.connect({ address: h.connection.options.address })),
    );
    try {
      const clients = connections.map((connection) =>
        h.clientFor({ temporal: new Client({ connection, namespace: 'default', dataConverter: testDataConverter() }) }),
      );
      const replies = await Promise.all(clients.map((client) => client.charge(tenant, key, body)));

      expect(replies.filter((r) => !r.replayed)).toHaveLength(1);
      for (const reply of replies) {
        expect(reply.completed).toBe(true);
        expect(reply.charge).toEqual(replies[0]!.charge);
      }
      expect(replies[0]!.charge.status).toBe('succeeded');
    } finally {
      await Promise.all(connections.map((c) => c.close()));
    }
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100_000 - 1_234);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('eager start on the worker\'s own connection (as `chargeguard start` runs): 30 concurrent starts, one debit', async () => {
    const tenant = await fundedTenant(h, { label: 'eager', payerMinor: 100_000 });
    const taskQueue = `eager-${newKey()}`;
    const key = newKey();
    const worker = await startTestWorker({ taskQueue, pool: h.pool });
    try {
      const client = h.clientFor({
        taskQueue,
        temporal: new Client({ connection: worker.connection, namespace: 'default', dataConverter: testDataConverter() }),
        eagerWorkflowStart: true,
      });
      const body = chargeBody({ amount: 4_321 });
      const replies = await Promise.all(Array.from({ length: 30 }, () => client.charge(tenant, key, body)));

      expect(replies.filter((r) => !r.replayed)).toHaveLength(1);
      for (const reply of replies) {
        expect(reply.completed).toBe(true);
        expect(reply.charge).toEqual(replies[0]!.charge);
      }
      expect(replies[0]!.charge.status).toBe('succeeded');
      // After it settled, one more of the same request is a replay and moves nothing either.
      expect((await client.charge(tenant, key, body)).replayed).toBe(true);
    } finally {
      await worker.stop();
    }
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100_000 - 4_321);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('the same key with a different amount: typed conflict, no second execution, balances unchanged', async () => {
    const tenant = await fundedTenant(h, { label: 'mismatch' });
    const key = newKey();
    const body = chargeBody({ amount: 1_000 });
    const first = await h.client.charge(tenant, key, body);
    expect(first.charge.status).toBe('succeeded');
    const payerBefore = await balanceOf(h.pool, tenant, 'payer');

    await expect(h.client.charge(tenant, key, { ...body, amount: 1_001 })).rejects.toBeInstanceOf(
      IdempotencyConflictError,
    );
    await expect(h.client.charge(tenant, key, { ...body, capture: 'manual' })).rejects.toBeInstanceOf(
      IdempotencyConflictError,
    );

    expect(await balanceOf(h.pool, tenant, 'payer')).toEqual(payerBefore);
    expect(await captureCount(h.pool, tenant, key)).toBe(1);
    expect(await countExecutions(chargeWorkflowId(tenant, key))).toBe(1);
    // The original request is still answered with the original outcome.
    const again = await h.client.charge(tenant, key, body);
    expect(again.charge).toEqual(first.charge);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('insufficient funds: DECLINED, balances unchanged, and still DECLINED after the account is funded', async () => {
    const tenant = await fundedTenant(h, { label: 'declined', payerMinor: 500 });
    const key = newKey();
    const body = chargeBody({ amount: 501 });

    const first = await h.client.charge(tenant, key, body);
    expect(first.charge.status).toBe('declined');
    expect(first.charge.declineCode).toBe('insufficient_funds');
    const payer = await balanceOf(h.pool, tenant, 'payer');
    expect([payer.postedMinor, payer.pendingMinor]).toEqual([500, 0]);

    await deposit(h.pool, tenant, 'payer', 10_000, 'top-up');
    const retry = await h.client.charge(tenant, key, body);
    expect(retry.replayed).toBe(true);
    expect(retry.charge).toEqual(first.charge);
    expect(await captureCount(h.pool, tenant, key)).toBe(0);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_500);
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('unknown accounts and mixed currencies are refused before any workflow starts', async () => {
    const tenant = newTenant('precheck');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 500 });
    await openAccount(h.pool, tenant, 'payee-eur', { currency: 'EUR' });
    const unknown = newKey();
    const error = await h.client.charge(tenant, unknown, chargeBody({ payee_account_id: 'nobody' })).catch((e) => e);
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).errors).toEqual([
      { field: 'payee_account_id', message: 'no account nobody for this tenant' },
    ]);
    const mixed = newKey();
    await expect(h.client.charge(tenant, mixed, chargeBody({ payee_account_id: 'payee-eur' }))).rejects.toBeInstanceOf(
      ValidationError,
    );
    for (const key of [unknown, mixed]) {
      await expect(h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).describe()).rejects.toBeInstanceOf(
        WorkflowNotFoundError,
      );
    }
    expect((await countLedger(h.pool, tenant)).charges).toBe(0);
  });

  it('after Temporal forgets the workflow id, a new start reports the original outcome and moves no money', async () => {
    const tenant = await fundedTenant(h, { label: 'forgotten' });
    const body = chargeBody({ amount: 3_000 });
    const succeededKey = newKey('succeeded');
    const declinedKey = newKey('declined');
    const succeeded = await h.client.charge(tenant, succeededKey, body);
    const declined = await h.client.charge(tenant, declinedKey, { ...body, amount: 50_000 });
    expect(succeeded.charge.status).toBe('succeeded');
    expect(declined.charge.status).toBe('declined');
    await deposit(h.pool, tenant, 'payer', 100_000, 'rich-now');
    const payerBefore = await balanceOf(h.pool, tenant, 'payer');

    // A fresh Temporal server on the same database: it has never heard of these keys, as after
    // the retention period. Only the ledger remembers.
    const dir = await mkdtemp(join(tmpdir(), 'chargeguard-fresh-temporal-'));
    const fresh = await startChargeguardDevServer({ dbFilePath: join(dir, 'temporal.sqlite'), uiPort: null });
    const connection = await Connection.connect({ address: fresh.address });
    const worker = await startTestWorker({ taskQueue: 'charges', pool: h.pool, temporalAddress: fresh.address });
    try {
      const client = h.clientFor({ temporal: new Client({ connection, namespace: 'default', dataConverter: testDataConverter() }) });
      const again = await client.charge(tenant, succeededKey, body);
      const againDeclined = await client.charge(tenant, declinedKey, { ...body, amount: 50_000 });
      expect(again.charge).toEqual(succeeded.charge);
      expect(againDeclined.charge).toEqual(declined.charge);

      // A different request under a forgotten key is refused, by the ledger this time, and the
      // original request is still answered with the original outcome afterwards.
      const otherKeyForgotten = newKey('other');
      expect((await h.client.charge(tenant, otherKeyForgotten, body)).charge.status).toBe('succeeded');
      await expect(client.charge(tenant, otherKeyForgotten, { ...body, amount: 3_001 })).rejects.toBeInstanceOf(
        IdempotencyConflictError,
      );
      const original = await client.charge(tenant, otherKeyForgotten, body);
      expect(original.charge.status).toBe('succeeded');
      expect(original.replayed).toBe(true);
      expect(await captureCount(h.pool, tenant, otherKeyForgotten)).toBe(1);
    } finally {
      await worker.stop();
      await connection.close();
      await fresh.stop();
      await rm(dir, { recursive: true, force: true });
    }
    expect(await captureCount(h.pool, tenant, succeededKey)).toBe(1);
    expect(await captureCount(h.pool, tenant, declinedKey)).toBe(0);
    expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(payerBefore.postedMinor - 3_000);
    await expectLedgerInvariants(h.pool, tenant);
  });
});
