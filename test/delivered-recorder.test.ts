import { describe, expect, it } from 'vitest';
import type { LedgerPool } from '../src/ledger/pool.js';
import type { DeliveredAttempt } from '../src/ledger/webhook-endpoints.js';
import { DeliveredRecorder } from '../src/outbound/delivered-recorder.js';

/** A pool that only counts the statements it is given, and how many successes each carried. */
function countingPool(): { pool: LedgerPool; batches: number[] } {
  const batches: number[] = [];
  const pool = {
    query: async (_text: string, values: unknown[][]) => {
      batches.push(values[0]!.length);
      return { rows: [], rowCount: 1 };
    },
  } as unknown as LedgerPool;
  return { pool, batches };
}

const success = (deliveryId: number): DeliveredAttempt => ({
  deliveryId,
  endpointId: 'we_test',
  eventId: `evt_${deliveryId}`,
  attempt: 1,
  startedAt: new Date(),
  durationMs: 1,
  statusCode: 204,
});

describe('the delivered recorder (how successes are grouped into statements)', () => {
  it('with nothing else being sent, a success is written at once, alone', async () => {
    const { pool, batches } = countingPool();
    const recorder = new DeliveredRecorder(pool, () => 0, 60_000);
    await recorder.record(success(1));
    expect(batches).toEqual([1]);
  });

  it('successes of requests sent together wait for the last answer and go in one statement', async () => {
    const { pool, batches } = countingPool();
    let sending = 3;
    // A hold far longer than the test: only the last answer can release the batch.
    const recorder = new DeliveredRecorder(pool, () => sending, 60_000);
    const recorded: Array<Promise<void>> = [];
    for (let i = 1; i <= 3; i += 1) {
      sending -= 1;
      recorded.push(recorder.record(success(i)));
    }
    await Promise.all(recorded);
    expect(batches).toEqual([3]);
  });

  it('a failed answer that was the last one being sent releases the waiting successes', async () => {
    const { pool, batches } = countingPool();
    let sending = 2;
    const recorder = new DeliveredRecorder(pool, () => sending, 60_000);
    sending -= 1;
    const waiting = recorder.record(success(1));
    expect(batches).toEqual([]);
    sending -= 1;
    recorder.nudge();
    await waiting;
    expect(batches).toEqual([1]);
  });

  it('a success waits holdMs at most for answers still out', async () => {
    const { pool, batches } = countingPool();
    const recorder = new DeliveredRecorder(pool, () => 1, 30);
    await recorder.record(success(1));
    expect(batches).toEqual([1]);
  });

  it('while carried, successes wait for the claim that takes them (no statement of their own), and settle with its outcome', async () => {
    const { pool, batches } = countingPool();
    let carried = true;
    const recorder = new DeliveredRecorder(pool, () => 0, 0, () => carried);
    const first = recorder.record(success(1));
    const second = recorder.record(success(2));
    recorder.nudge();
    expect(batches).toEqual([]);
    expect(recorder.waiting()).toBe(2);
    const taken = recorder.takeWaiting();
    expect(taken.attempts.map((a) => a.deliveryId)).toEqual([1, 2]);
    expect(recorder.waiting()).toBe(0);
    taken.settle();
    await Promise.all([first, second]);

    const failed = recorder.record(success(3));
    const refused = recorder.takeWaiting();
    refused.settle(new Error('the claim failed'));
    await expect(failed).rejects.toThrow('the claim failed');

    // Once no claim carries them (the deliverer stopped), a success is written by the recorder.
    const late = recorder.record(success(4));
    carried = false;
    recorder.nudge();
    await late;
    expect(batches).toEqual([1]);
  });
});
