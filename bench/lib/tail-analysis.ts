import type { ChargeMarks } from './charge-timeline.js';
import { cpuCounterNames, cpuPercentOver, gaugeNames, gaugeOver, type CpuCounterName, type GaugeName, type GaugeSeries } from './gauge-sampler.js';
import { percentileOfSorted } from './stats.js';
import type { WorkflowMarks } from './workflow-marks.js';

/** A charge's marks, with its workflow's history marks when its history was read. */
export type ChargeRecord = ChargeMarks & Partial<WorkflowMarks>;

type MarkName = {
  [K in keyof ChargeRecord]-?: NonNullable<ChargeRecord[K]> extends number ? K : never;
}[keyof ChargeRecord];

export interface StageDefinition {
  name: string;
  from: MarkName;
  to: MarkName;
  /** Needs the workflow's history: known for the charges whose history was read. */
  needsHistory: boolean;
}

/**
 * A charge's life in consecutive stages, from the arrival the open loop scheduled to the answer its
 * caller got; the stages of one charge add up to its latency. The start call is cut where the
 * server stamped the first workflow task started: under eager start the server starts that task
 * inside the start call, so what comes after the stamp (the server persisting the start, the reply)
 * is apart from what came before it (the call reaching the server). Without eager start the task
 * starts after the call returns and "first task started → start returned" is negative.
 */
export const chainStages: readonly StageDefinition[] = [
  { name: 'arrival → accept', from: 'scheduledMs', to: 'acceptedMs', needsHistory: false },
  { name: 'accept → start call (ledger reads)', from: 'acceptedMs', to: 'startCalledMs', needsHistory: false },
  { name: 'start call → first task started (server stamp)', from: 'startCalledMs', to: 'firstTaskStartedMs', needsHistory: true },
  { name: 'first task started → start returned', from: 'firstTaskStartedMs', to: 'startReturnedMs', needsHistory: true },
  { name: 'start returned → Try start', from: 'startReturnedMs', to: 'tryStartMs', needsHistory: false },
  { name: 'Try', from: 'tryStartMs', to: 'tryEndMs', needsHistory: false },
  { name: 'Try end → Confirm start', from: 'tryEndMs', to: 'confirmStartMs', needsHistory: false },
  { name: 'Confirm', from: 'confirmStartMs', to: 'confirmEndMs', needsHistory: false },
  { name: 'Confirm end → workflow completed', from: 'confirmEndMs', to: 'completedMs', needsHistory: true },
  { name: 'workflow completed → result delivered', from: 'completedMs', to: 'deliveredMs', needsHistory: true },
];

/** Spans over several stages (every charge has those without history stages); not part of the chain. */
export const spanStages: readonly StageDefinition[] = [
  { name: '[start call → start returned]', from: 'startCalledMs', to: 'startReturnedMs', needsHistory: false },
  { name: '[first task started → Try start]', from: 'firstTaskStartedMs', to: 'tryStartMs', needsHistory: true },
  { name: '[Confirm end → result delivered]', from: 'confirmEndMs', to: 'deliveredMs', needsHistory: false },
  { name: '[total: arrival → result delivered]', from: 'scheduledMs', to: 'deliveredMs', needsHistory: false },
];

export function stageMs(record: ChargeRecord, stage: StageDefinition): number | null {
  const from = record[stage.from];
  const to = record[stage.to];
  return typeof from === 'number' && typeof to === 'number' && Number.isFinite(from) && Number.isFinite(to) ? to - from : null;
}

export function totalMs(record: ChargeRecord): number | null {
  return stageMs(record, spanStages[spanStages.length - 1]!);
}

export interface StageFigure {
  stage: string;
  count: number;
  p50Ms: number;
  p99Ms: number;
}

export function stageFigures(records: readonly ChargeRecord[], stages: readonly StageDefinition[]): StageFigure[] {
  return stages.map((stage) => {
    const values = records.map((r) => stageMs(r, stage)).filter((v): v is number => v !== null).sort((a, b) => a - b);
    return { stage: stage.name, count: values.length, p50Ms: percentileOfSorted(values, 0.5), p99Ms: percentileOfSorted(values, 0.99) };
  });
}

/** The slowest `fraction` of the charges that completed, by latency from the scheduled arrival (slowest first). */
export function slowest(records: readonly ChargeRecord[], fraction: number): ChargeRecord[] {
  const done = records.filter((r) => r.ok === true && totalMs(r) !== null);
  done.sort((a, b) => totalMs(b)! - totalMs(a)!);
  return done.slice(0, Math.max(1, Math.ceil(done.length * fraction)));
}

export interface GaugeWindow {
  gauges: Record<GaugeName, { mean: number; max: number }>;
  cpuPercent: Record<CpuCounterName, number>;
}

export function gaugeWindow(series: GaugeSeries, fromMs: number, toMs: number): GaugeWindow {
  return {
    gauges: Object.fromEntries(gaugeNames.map((name) => [name, gaugeOver(series, name, fromMs, toMs)])) as GaugeWindow['gauges'],
    cpuPercent: Object.fromEntries(cpuCounterNames.map((name) => [name, cpuPercentOver(series, name, fromMs, toMs)])) as GaugeWindow['cpuPercent'],
  };
}

/** Medians over several windows of each gauge's mean (and max), and of each CPU rate. */
export interface GaugeMedians {
  windows: number;
  gauges: Record<GaugeName, { mean: number; max: number }>;
  cpuPercent: Record<CpuCounterName, number>;
}

export function medianOfWindows(windows: readonly GaugeWindow[]): GaugeMedians {
  const median = (values: number[]): number => percentileOfSorted(values.filter(Number.isFinite).sort((a, b) => a - b), 0.5);
  return {
    windows: windows.length,
    gauges: Object.fromEntries(
      gaugeNames.map((name) => [name, { mean: median(windows.map((w) => w.gauges[name].mean)), max: median(windows.map((w) => w.gauges[name].max)) }]),
    ) as GaugeMedians['gauges'],
    cpuPercent: Object.fromEntries(cpuCounterNames.map((name) => [name, median(windows.map((w) => w.cpuPercent[name]))])) as GaugeMedians['cpuPercent'],
  };
}

export interface ExcessByStage {
  stage: string;
  /** Median of the stage over the other charges that have it: what a slow charge's stage is compared with. */
  medianMs: number;
  /** Median of the stage among the slowest charges. */
  slowMedianMs: number;
  /** Mean over the slowest charges of (their stage − the median stage). */
  meanExcessMs: number;
  /** That mean as a share of the slowest charges' mean excess over the median latency. */
  shareOfExcess: number;
  /** Slowest charges for which this stage carries the largest excess. */
  dominantIn: number;
  /** Gauges during this stage of the slow charges it dominates, and during the same stage of the sampled others. */
  gaugesWhenDominant: GaugeMedians | null;
  gaugesInSample: GaugeMedians | null;
}

export interface TailBreakdown {
  slowCount: number;
  medianTotalMs: number;
  slowMeanTotalMs: number;
  stages: ExcessByStage[];
  /** Per slow charge: its dominant stage and that stage's excess. */
  dominantByCharge: { workflowId: string; totalMs: number; stage: string; excessMs: number }[];
}

/**
 * Where the slowest charges' excess over the median goes: for each chain stage, the slow charges'
 * excess over that stage's median; for each slow charge, the stage with the largest excess, and the
 * gauges over that stage's window (set beside the same stage in a sample of ordinary charges).
 */
export function breakDownTail(
  all: readonly ChargeRecord[],
  slow: readonly ChargeRecord[],
  sample: readonly ChargeRecord[],
  series: GaugeSeries | null,
): TailBreakdown {
  const sortedTotals = all.map(totalMs).filter((v): v is number => v !== null).sort((a, b) => a - b);
  const medianTotalMs = percentileOfSorted(sortedTotals, 0.5);
  // Compared with the ordinary charges: the slow ones (whose histories were all read) would pull
  // the medians of the history stages towards themselves.
  const slowIds = new Set(slow.map((r) => r.workflowId));
  const medians = stageFigures(all.filter((r) => !slowIds.has(r.workflowId)), chainStages).map((f) => f.p50Ms);
  const slowTotals = slow.map((r) => totalMs(r)!);
  const slowMeanTotalMs = slowTotals.reduce((s, v) => s + v, 0) / Math.max(1, slow.length);
  const dominantByCharge = slow.map((record) => {
    let best = { stage: 'unknown', excessMs: Number.NEGATIVE_INFINITY, index: -1 };
    chainStages.forEach((stage, index) => {
      const ms = stageMs(record, stage);
      if (ms === null || !Number.isFinite(medians[index]!)) return;
      const excessMs = ms - medians[index]!;
      if (excessMs > best.excessMs) best = { stage: stage.name, excessMs, index };
    });
    return { record, ...best };
  });
  const stages = chainStages.map((stage, index): ExcessByStage => {
    const slowValues = slow.map((r) => stageMs(r, stage)).filter((v): v is number => v !== null);
    const meanExcessMs = slowValues.reduce((s, v) => s + (v - medians[index]!), 0) / Math.max(1, slowValues.length);
    const dominated = dominantByCharge.filter((d) => d.index === index);
    const windowOf = (r: ChargeRecord): GaugeWindow | null => {
      const from = r[stage.from];
      const to = r[stage.to];
      if (series === null || typeof from !== 'number' || typeof to !== 'number') return null;
      return gaugeWindow(series, Math.min(from, to), Math.max(from, to));
    };
    const windows = (records: readonly ChargeRecord[]): GaugeMedians | null => {
      const found = records.map(windowOf).filter((w): w is GaugeWindow => w !== null);
      return found.length === 0 ? null : medianOfWindows(found);
    };
    return {
      stage: stage.name,
      medianMs: medians[index]!,
      slowMedianMs: percentileOfSorted([...slowValues].sort((a, b) => a - b), 0.5),
      meanExcessMs,
      shareOfExcess: meanExcessMs / (slowMeanTotalMs - medianTotalMs),
      dominantIn: dominated.length,
      gaugesWhenDominant: windows(dominated.map((d) => d.record)),
      gaugesInSample: dominated.length === 0 ? null : windows(sample),
    };
  });
  return {
    slowCount: slow.length,
    medianTotalMs,
    slowMeanTotalMs,
    stages,
    dominantByCharge: dominantByCharge.map((d) => ({ workflowId: d.record.workflowId, totalMs: totalMs(d.record)!, stage: d.stage, excessMs: d.excessMs })),
  };
}

/**
 * The slow charges grouped by arrival: charges arriving less than `gapMs` apart share an episode.
 * Whether the episodes come at a steady period, and whether that period follows the load, tells a
 * timer from a threshold (a checkpoint, a garbage collection) that the traffic reaches.
 */
export function episodesOf(slow: readonly ChargeRecord[], originMs: number, gapMs = 1_000): { atS: number; charges: number }[] {
  const arrivals = slow.map((r) => r.scheduledMs).filter((t): t is number => t !== undefined).sort((a, b) => a - b);
  const episodes: { atS: number; charges: number; lastMs: number }[] = [];
  for (const t of arrivals) {
    const current = episodes[episodes.length - 1];
    if (current !== undefined && t - current.lastMs < gapMs) {
      current.charges += 1;
      current.lastMs = t;
    } else {
      episodes.push({ atS: (t - originMs) / 1000, charges: 1, lastMs: t });
    }
  }
  return episodes.map(({ atS, charges }) => ({ atS, charges }));
}
