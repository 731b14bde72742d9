import { describe, expect, it } from 'vitest';
import type { LedgerPool } from '../src/ledger/pool.js';
import { setStepBatchLimits, stepBatchDepth, stepBatcher } from '../src/ledger/step-batches.js';
import { cpuPercentOver, gaugeNames, gaugeOver, type GaugeSeries } from '../bench/lib/gauge-sampler.js';
import { breakDownTail, chainStages, episodesOf, slowest, stageFigures, totalMs, type ChargeRecord } from '../bench/lib/tail-analysis.js';

// The tail breakdown's arithmetic (bench/lib/tail-analysis.ts, gauge-sampler.ts) on made-up charges
// and gauges, and the step batcher's read-only depth the sampler reads.

/** A charge whose every stage takes `stageMs`, but for `slowStage`, which takes `slowMs`. */
function charge(id: number, stageMs: number, slowStage?: string, slowMs = 0): ChargeRecord {
  const record: ChargeRecord = { workflowId: `charge/t/k-${id}`, ok: true };
  let at = 1_000_000 + id * 1_000;
  record.scheduledMs = at;
  for (const stage of chainStages) {
    at += stage.name === slowStage ? slowMs : stageMs;
    (record as unknown as Record<string, number>)[stage.to] = at;
  }
  return record;
}

function series(atMs: number[], values: Partial<Record<(typeof gaugeNames)[number], number[]>>, temporalCpuS: number[]): GaugeSeries {
  const column = (v: number[] | undefined): Float64Array => Float64Array.from(v ?? atMs.map(() => 0));
  return {
    atMs: Float64Array.from(atMs),
    gauges: Object.fromEntries(gaugeNames.map((name) => [name, column(values[name])])) as GaugeSeries['gauges'],
    cpu: { temporalCpuS: Float64Array.from(temporalCpuS), thisProcessCpuS: column(undefined), machineBusyS: column(undefined) },
    count: atMs.length,
    intervalMs: 10,
    eventLoopDelayMs: { p50: 0, p99: 0, max: 0 },
  };
}

describe('tail breakdown', () => {
  it('stages of a charge add up to its latency, and the slowest are picked by it', () => {
    const records = [charge(1, 2), charge(2, 2, 'Try', 50), charge(3, 2)];
    expect(totalMs(records[0]!)).toBe(2 * chainStages.length);
    expect(slowest(records, 0.01).map((r) => r.workflowId)).toEqual(['charge/t/k-2']);
    const figures = stageFigures(records, chainStages);
    expect(figures.find((f) => f.stage === 'Try')).toMatchObject({ count: 3, p50Ms: 2, p99Ms: 50 });
  });

  it('names the stage that carries the slow charges\' excess, with the gauges during it', () => {
    const ordinary = Array.from({ length: 99 }, (_, i) => charge(i, 2));
    const slow = [charge(500, 2, 'Try end → Confirm start', 42)];
    const slowRecord = slow[0]!;
    const from = slowRecord.tryEndMs!;
    const to = slowRecord.confirmStartMs!;
    // The queue is 7 deep only while the slow charge waited between its steps, and Temporal burned a core.
    const atMs = Array.from({ length: 200 }, (_, i) => from - 500 + i * 10);
    const confirmQueued = atMs.map((t) => (t >= from && t <= to ? 7 : 0));
    const cpu = atMs.map((_, i) => i * 0.01);
    const gauges = series(atMs, { confirmQueued }, cpu);
    const tail = breakDownTail([...ordinary, ...slow], slow, ordinary.slice(0, 10), gauges);
    expect(tail.slowCount).toBe(1);
    expect(tail.medianTotalMs).toBe(2 * chainStages.length);
    const dominant = tail.stages.find((s) => s.dominantIn > 0)!;
    expect(dominant.stage).toBe('Try end → Confirm start');
    expect(dominant.meanExcessMs).toBe(40);
    expect(dominant.shareOfExcess).toBeCloseTo(1, 6);
    expect(dominant.gaugesWhenDominant?.gauges.confirmQueued.mean).toBe(7);
    expect(dominant.gaugesInSample?.gauges.confirmQueued.mean).toBe(0);
    expect(tail.dominantByCharge).toEqual([{ workflowId: slowRecord.workflowId, totalMs: 2 * (chainStages.length - 1) + 42, stage: dominant.stage, excessMs: 40 }]);
  });

  it('groups slow charges that arrived less than a second apart into episodes', () => {
    const at = (ms: number): ChargeRecord => ({ workflowId: `w-${ms}`, scheduledMs: ms });
    expect(episodesOf([at(20_500), at(1_000), at(1_400), at(21_000), at(1_900)], 0)).toEqual([
      { atS: 1, charges: 3 },
      { atS: 20.5, charges: 2 },
    ]);
  });

  it('averages a gauge over a window, or takes the nearest sample when none falls inside', () => {
    const gauges = series([0, 10, 20, 30], { tryQueued: [1, 3, 5, 7] }, [0, 0.05, 0.1, 0.15]);
    expect(gaugeOver(gauges, 'tryQueued', 5, 25)).toEqual({ mean: 4, max: 5 });
    expect(gaugeOver(gauges, 'tryQueued', 11, 12)).toEqual({ mean: 5, max: 5 });
    // 0.15 s of CPU over 30 ms of wall time: five cores' worth.
    expect(cpuPercentOver(gauges, 'temporalCpuS', 0, 30, 0)).toBeCloseTo(500, 6);
  });
});

describe('step batcher depth', () => {
  it('counts the calls waiting for a slot and the batch calls running, and drains to zero', async () => {
    const pool = {} as LedgerPool;
    setStepBatchLimits(pool, { maxInFlight: 2, maxBatchSize: 32 });
    const releases: (() => void)[] = [];
    const batcher = stepBatcher<string, string>(pool, 'try', {
      keyOf: (item) => item,
      mayBatch: () => true,
      runOne: (item) => new Promise((resolve) => releases.push(() => resolve(item))),
      runMany: (items) => new Promise((resolve) => releases.push(() => resolve(new Map(items.map((item) => [item, item]))))),
    });
    expect(stepBatchDepth(pool, 'try')).toEqual({ waiting: 0, inFlight: 0 });
    const answers = ['a', 'b', 'c', 'd', 'e'].map((item) => batcher.submit(item));
    expect(stepBatchDepth(pool, 'try')).toEqual({ waiting: 3, inFlight: 2 });
    expect(stepBatchDepth(pool, 'confirm')).toEqual({ waiting: 0, inFlight: 0 });
    // Release whatever is running until every call is answered: the three waiting go as one batch.
    const all = Promise.all(answers);
    let settled = false;
    void all.then(() => (settled = true));
    const deadlineMs = Date.now() + 5_000;
    while (!settled && Date.now() < deadlineMs) {
      releases.splice(0).forEach((release) => release());
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(await all).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(stepBatchDepth(pool, 'try')).toEqual({ waiting: 0, inFlight: 0 });
  });
});
