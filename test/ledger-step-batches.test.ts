import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { confirmHold, tryHold } from '../src/ledger/charges.js';
import { LedgerRefusalError } from '../src/ledger/errors.js';
import { chargeFingerprint, chargeIdFor } from '../src/service/intent.js';
import { defaultStepBatchLimits, setStepBatchLimits, stepBatchCounts } from '../src/ledger/step-batches.js';
import { balanceOf, expectLedgerInvariants, ledgerIntent, newKey, newTenant, openAccount, useHarness } from './support/harness.js';

// Group commit of the ledger's steps (src/ledger/step-batches.ts, ledger_try_batch and
// ledger_confirm_batch): calls that queue behind a step in flight go together in one transaction.
// Every answer must be the one the call would have had alone, and a batch that fails must leave
// nothing behind and answer each call by itself.

const h = useHarness();

beforeEach(() => {
  // One call in flight: every call that arrives meanwhile waits and joins the next batch.
  setStepBatchLimits(h.pool, { maxInFlight: 1, maxBatchSize: 32 });
});
afterEach(() => {
  setStepBatchLimits(h.pool, defaultStepBatchLimits);
});

/**
 * Runs `body` while the first call of `statement` loses its answer after it committed, as a
 * connection dropped between the commit and the reply would. Every other call passes through (the
 * client goes back to the pool afterwards).
 */
async function withReplyLostAfterCommit<T>(statement: string, body: () => Promise<T>): Promise<{ value: T; dropped: number }> {
  const pool = h.pool;
  const connect = pool.connect.bind(pool);
  let dropped = 0;
  const lossy = async (): Promise<pg.PoolClient> => {
    const client = await connect();
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: unknown }).query = (...args: unknown[]) => {
      const first = args[0] as { name?: string } | undefined;
      if (first?.name !== statement || dropped > 0) return query(...args);
      dropped += 1;
      return (query(...args) as Promise<unknown>).then(() => {
        throw new Error('Connection terminated unexpectedly');
      });
    };
    return client;
  };
  pool.connect = lossy as typeof pool.connect;
  try {
    return { value: await body(), dropped };
  } finally {
    pool.connect = connect as typeof pool.connect;
  }
}

describe('ledger steps batched under load', () => {
  it('40 concurrent Trys and Confirms of distinct keys: each its own hold and capture, most of them in batches', async () => {
    const tenant = newTenant('batches');
    const payers = Array.from({ length: 40 }, (_, i) => `payer-${i}`);
    for (const payer of payers) await openAccount(h.pool, tenant, payer, { depositMinor: 1_000 });
    await openAccount(h.pool, tenant, 'merchant');
    const before = { try: stepBatchCounts(h.pool, 'try'), confirm: stepBatchCounts(h.pool, 'confirm') };

    const keys = payers.map(() => newKey());
    const tried = await Promise.all(payers.map((payer, i) => tryHold(h.pool, ledgerIntent(tenant, keys[i]!, payer, 'merchant', 700), 60_000)));
    expect(tried.map((row) => [row.charge.idempotencyKey, row.charge.payerAccountId, row.holdState])).toEqual(
      keys.map((key, i) => [key, payers[i], 'TRIED']),
    );
    const confirmed = await Promise.all(keys.map((key) => confirmHold(h.pool, tenant, key, null)));
    expect(confirmed.map((row) => [row.charge.idempotencyKey, row.charge.status])).toEqual(keys.map((key) => [key, 'succeeded']));

    const after = { try: stepBatchCounts(h.pool, 'try'), confirm: stepBatchCounts(h.pool, 'confirm') };
    for (const step of ['try', 'confirm'] as const) {
      expect(after[step].batchedItems - before[step].batchedItems).toBeGreaterThanOrEqual(39 - 1);
      expect(after[step].failedBatches - before[step].failedBatches).toBe(0);
    }
    expect((await balanceOf(h.pool, tenant, 'merchant')).postedMinor).toBe(40 * 700);
    for (const payer of payers) expect(await balanceOf(h.pool, tenant, payer)).toMatchObject({ postedMinor: 300, pendingMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('the same key five times in one batch: one reservation, the same row for every caller', async () => {
    const tenant = newTenant('batch-dup');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 1_000 });
    await openAccount(h.pool, tenant, 'payee');
    const key = newKey();
    const intent = ledgerIntent(tenant, key, 'payer', 'payee', 600);
    const rows = await Promise.all([tryHold(h.pool, ledgerIntent(tenant, newKey(), 'payer', 'payee', 1), 60_000), ...Array.from({ length: 5 }, () => tryHold(h.pool, intent, 60_000))]);
    expect(new Set(rows.slice(1).map((row) => `${row.charge.id} ${row.holdState} ${row.charge.createdAt}`)).size).toBe(1);
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ pendingMinor: 601 });
    const captured = await Promise.all(Array.from({ length: 5 }, () => confirmHold(h.pool, tenant, key, null)));
    expect(captured.map((row) => row.charge.status)).toEqual(Array(5).fill('succeeded'));
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 1_000 - 600, pendingMinor: 1 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('funds for three of five: the batch declines exactly two, as one at a time would', async () => {
    const tenant = newTenant('batch-funds');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 3_000 });
    await openAccount(h.pool, tenant, 'payee');
    const rows = await Promise.all(
      Array.from({ length: 5 }, () => tryHold(h.pool, ledgerIntent(tenant, newKey(), 'payer', 'payee', 1_000), 60_000)),
    );
    const states = rows.map((row) => row.charge.declineCode ?? row.holdState);
    expect(states.filter((state) => state === 'TRIED')).toHaveLength(3);
    expect(states.filter((state) => state === 'insufficient_funds')).toHaveLength(2);
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ pendingMinor: 3_000, availableMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('one refused item fails its batch: nothing of the batch stays, every other call still gets its own answer', async () => {
    const tenant = newTenant('batch-refusal');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    const reused = newKey();
    await tryHold(h.pool, ledgerIntent(tenant, reused, 'payer', 'payee', 100), 60_000);
    const before = stepBatchCounts(h.pool, 'try');

    const keys = Array.from({ length: 6 }, () => newKey());
    const settled = await Promise.allSettled([
      ...keys.map((key) => tryHold(h.pool, ledgerIntent(tenant, key, 'payer', 'payee', 500), 60_000)),
      // The same key for a different amount: a different request, refused with CGI01.
      tryHold(h.pool, ledgerIntent(tenant, reused, 'payer', 'payee', 101), 60_000),
    ]);
    const refused = settled.at(-1)!;
    expect(refused.status).toBe('rejected');
    expect((refused as PromiseRejectedResult).reason).toBeInstanceOf(LedgerRefusalError);
    expect(((refused as PromiseRejectedResult).reason as LedgerRefusalError).refusal).toBe('idempotencyConflict');
    expect(settled.slice(0, -1).map((result) => result.status === 'fulfilled' && result.value.holdState)).toEqual(Array(6).fill('TRIED'));
    expect(stepBatchCounts(h.pool, 'try').failedBatches - before.failedBatches).toBeGreaterThanOrEqual(1);
    // The first hold (100) and the six (500 each), once each: the failed batch reserved nothing.
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ pendingMinor: 100 + 6 * 500 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('a Try batch that committed but whose answer was lost: each call runs again alone and gets the committed row, nothing twice', async () => {
    const tenant = newTenant('batch-lost-reply');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    const before = stepBatchCounts(h.pool, 'try');
    const { value: rows, dropped } = await withReplyLostAfterCommit('ledger_try_batch', () =>
      Promise.all(Array.from({ length: 6 }, () => tryHold(h.pool, ledgerIntent(tenant, newKey(), 'payer', 'payee', 500), 60_000))),
    );
    expect(dropped).toBe(1);
    expect(stepBatchCounts(h.pool, 'try').failedBatches - before.failedBatches).toBe(1);
    expect(rows.map((row) => row.holdState)).toEqual(Array(6).fill('TRIED'));
    // Reserved once each: the batch's commit, found again by the Trys that ran alone.
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ pendingMinor: 6 * 500 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('a Confirm batch that committed but whose answer was lost: every charge captured once, every caller told so', async () => {
    const tenant = newTenant('batch-lost-capture');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    const keys = Array.from({ length: 6 }, () => newKey());
    for (const key of keys) await tryHold(h.pool, ledgerIntent(tenant, key, 'payer', 'payee', 500), 60_000);
    const before = stepBatchCounts(h.pool, 'confirm');
    const { value: rows, dropped } = await withReplyLostAfterCommit('ledger_confirm_batch', () =>
      Promise.all(keys.map((key) => confirmHold(h.pool, tenant, key, null))),
    );
    expect(dropped).toBe(1);
    expect(stepBatchCounts(h.pool, 'confirm').failedBatches - before.failedBatches).toBe(1);
    expect(rows.map((row) => [row.charge.idempotencyKey, row.charge.status])).toEqual(keys.map((key) => [key, 'succeeded']));
    expect(await balanceOf(h.pool, tenant, 'payee')).toMatchObject({ postedMinor: 6 * 500 });
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 10_000 - 6 * 500, pendingMinor: 0 });
    await expectLedgerInvariants(h.pool, tenant); // one_debit_per_key: one capture transfer per charge
  });

  it('the same keys arriving at once across concurrent batches: one reservation and one row per key', async () => {
    setStepBatchLimits(h.pool, { maxInFlight: 3, maxBatchSize: 4 });
    const tenant = newTenant('batch-dup-across');
    const payers = ['p0', 'p1', 'p2', 'p3'];
    for (const payer of payers) await openAccount(h.pool, tenant, payer, { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    const keys = Array.from({ length: 12 }, () => newKey());
    // Every key three times, interleaved so copies of one key land in different batches.
    const calls = [0, 1, 2].flatMap(() => keys.map((key, i) => ({ key, payer: payers[i % payers.length]! })));
    const rows = await Promise.all(calls.map(({ key, payer }) => tryHold(h.pool, ledgerIntent(tenant, key, payer, 'payee', 100), 60_000)));
    for (const key of keys) {
      const answers = rows.filter((row) => row.charge.idempotencyKey === key);
      expect(answers).toHaveLength(3);
      expect(new Set(answers.map((row) => `${row.charge.id} ${row.holdState} ${row.charge.createdAt}`)).size).toBe(1);
    }
    for (const payer of payers) expect(await balanceOf(h.pool, tenant, payer)).toMatchObject({ pendingMinor: 3 * 100 });
    await expectLedgerInvariants(h.pool, tenant);
  });

  it('text of every shape goes through the batch functions\' array parameters exactly as sent', async () => {
    const tenant = newTenant('batch-text');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    // What an array literal could mistake for syntax: NULL, quotes, backslashes, braces, commas.
    const shapes = ['NULL', 'null', '"quoted"', 'back\\slash\\', '{a,b}', 'a,b', ' lead and trail ', '', 'é 中文 🙂'];
    const intents = shapes.map((text, i) => {
      const key = newKey();
      const request = {
        orderId: `o-${i}-${text}`,
        payerAccountId: 'payer',
        payeeAccountId: 'payee',
        amountMinor: 10,
        currency: 'USD',
        captureMode: 'automatic' as const,
        description: text === '' ? null : text,
        metadata: { note: text, [`k${i}`]: `${text}}` },
      };
      return { tenant, idempotencyKey: key, chargeId: chargeIdFor(tenant, key), fingerprint: chargeFingerprint(request), request };
    });
    const before = stepBatchCounts(h.pool, 'try');
    const rows = await Promise.all(intents.map((intent) => tryHold(h.pool, intent, 60_000)));
    expect(stepBatchCounts(h.pool, 'try').batchedItems - before.batchedItems).toBeGreaterThanOrEqual(shapes.length - 1);
    expect(rows.map((row) => [row.charge.orderId, row.charge.description, row.charge.metadata, row.fingerprint])).toEqual(
      intents.map((intent) => [intent.request.orderId, intent.request.description, intent.request.metadata, intent.fingerprint]),
    );
  });

  it('batch size 1 sends every call alone', async () => {
    setStepBatchLimits(h.pool, { maxInFlight: 1, maxBatchSize: 1 });
    const tenant = newTenant('batch-off');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    const before = stepBatchCounts(h.pool, 'try');
    await Promise.all(Array.from({ length: 8 }, () => tryHold(h.pool, ledgerIntent(tenant, newKey(), 'payer', 'payee', 100), 60_000)));
    const after = stepBatchCounts(h.pool, 'try');
    expect(after.batches - before.batches).toBe(0);
    expect(after.singleItems - before.singleItems).toBe(8);
  });

  it('refuses limits the batch functions cannot take', () => {
    expect(() => setStepBatchLimits(h.pool, { maxInFlight: 1, maxBatchSize: 65 })).toThrow(/1\.\.64/);
    expect(() => setStepBatchLimits(h.pool, { maxInFlight: 0, maxBatchSize: 8 })).toThrow(/maxInFlight/);
  });
});
