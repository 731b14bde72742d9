import { readFile } from 'node:fs/promises';
import { monitorEventLoopDelay, PerformanceObserver, type IntervalHistogram } from 'node:perf_hooks';
import type { Worker } from '@temporalio/worker';
import type { LedgerPool } from '../../src/ledger/pool.js';
import { stepBatchDepth } from '../../src/ledger/step-batches.js';
import { epochNowMs } from './charge-timeline.js';

/** The gauges read at each sample; each a count unless its name says otherwise. */
export const gaugeNames = [
  /** Workflow activations the worker is processing (its workflow-task slots in use). */
  'workflowActivations',
  /** Local activities running (Try and Confirm run as local activities). */
  'localActivities',
  'remoteActivities',
  /** 1 when the worker has a workflow poll outstanding. */
  'workflowPollOutstanding',
  'ledgerPoolTotal',
  'ledgerPoolIdle',
  /** Queries waiting for a connection of the worker's ledger pool. */
  'ledgerPoolWaiting',
  /** Try and Confirm calls queued in the step batchers, and batch calls running. */
  'tryQueued',
  'tryInFlight',
  'confirmQueued',
  'confirmInFlight',
  /** How late this sampler's timer fired: the event loop's delay as the worker and the load side feel it. */
  'eventLoopLagMs',
  /**
   * Milliseconds of garbage collection of this process's main isolate (activities, the client, the
   * load side) reported since the previous sample; the workflow thread's own isolate is not seen.
   */
  'mainGcMs',
] as const;
export type GaugeName = (typeof gaugeNames)[number];

/**
 * CPU time is read in clock ticks (10 ms): a rate only means something over a window, not per
 * sample. machineBusyS is every core's busy time (from /proc/stat): beside the two processes', it tells a
 * stall where the run's processes were descheduled (the machine busy with other work) from one
 * where they were waiting on something (the machine idle too).
 */
export const cpuCounterNames = ['temporalCpuS', 'thisProcessCpuS', 'machineBusyS'] as const;
export type CpuCounterName = (typeof cpuCounterNames)[number];

export interface GaugeSeries {
  atMs: Float64Array;
  gauges: Record<GaugeName, Float64Array>;
  cpu: Record<CpuCounterName, Float64Array>;
  count: number;
  intervalMs: number;
  /** The event loop's delay over the whole sampling (perf_hooks' histogram, beyond its 10 ms resolution). */
  eventLoopDelayMs: { p50: number; p99: number; max: number };
}

const ticksPerSecond = 100; // USER_HZ
const histogramResolutionMs = 10;

async function machineBusySeconds(): Promise<number> {
  const text = await readFile('/proc/stat', 'utf8').catch(() => null);
  const fields = text?.split('\n')[0]?.trim().split(/\s+/).slice(1, 9).map(Number);
  if (fields === undefined || fields.length < 5) return Number.NaN;
  // user nice system idle iowait irq softirq steal: busy is everything but idle and iowait.
  return fields.reduce((sum, n, i) => (i === 3 || i === 4 ? sum : sum + n), 0) / ticksPerSecond;
}

async function processCpuSeconds(pid: number): Promise<number> {
  const text = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (text === null) return Number.NaN;
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
}

/**
 * Reads the worker's, the ledger pool's and the step batchers' state every `intervalMs` (a timer on
 * the event loop the worker shares, so the timer's own lateness is the loop's delay), with the
 * Temporal server's and this process's CPU time. Preallocated for `maxDurationMs`; stops adding
 * samples when full.
 */
export class GaugeSampler {
  private readonly capacity: number;
  private readonly series: GaugeSeries;
  private timer: NodeJS.Timeout | null = null;
  private readonly histogram: IntervalHistogram = monitorEventLoopDelay({ resolution: histogramResolutionMs });
  private reading = false;
  private lastTemporalCpuS = Number.NaN;
  private lastMachineBusyS = Number.NaN;
  private gcMsSinceSample = 0;
  private readonly gcObserver = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) this.gcMsSinceSample += entry.duration;
  });

  constructor(
    private readonly subjects: { worker: Worker; ledger: LedgerPool; temporalPid: number | null },
    private readonly intervalMs: number,
    maxDurationMs: number,
  ) {
    this.capacity = Math.ceil(maxDurationMs / intervalMs) + 1;
    const column = (): Float64Array => new Float64Array(this.capacity);
    this.series = {
      atMs: column(),
      gauges: Object.fromEntries(gaugeNames.map((name) => [name, column()])) as Record<GaugeName, Float64Array>,
      cpu: Object.fromEntries(cpuCounterNames.map((name) => [name, column()])) as Record<CpuCounterName, Float64Array>,
      count: 0,
      intervalMs,
      eventLoopDelayMs: { p50: Number.NaN, p99: Number.NaN, max: Number.NaN },
    };
  }

  start(): void {
    this.histogram.enable();
    this.gcObserver.observe({ entryTypes: ['gc'] });
    let expectedMs = performance.now() + this.intervalMs;
    const tick = (): void => {
      const lagMs = Math.max(0, performance.now() - expectedMs);
      this.sample(lagMs);
      expectedMs += this.intervalMs;
      // A late tick does not shift the schedule: the next lag is measured from where it should have been.
      if (expectedMs < performance.now()) expectedMs = performance.now() + this.intervalMs;
      this.timer = setTimeout(tick, Math.max(0, expectedMs - performance.now()));
    };
    this.timer = setTimeout(tick, this.intervalMs);
    this.refreshProcCpu();
  }

  stop(): GaugeSeries {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.histogram.disable();
    // The histogram records each whole timer interval, its resolution included (an idle loop reads
    // 10.3 ms at 10 ms): the delay is what lies beyond the resolution.
    const nsToMs = (ns: number): number => Math.max(0, ns / 1e6 - histogramResolutionMs);
    this.series.eventLoopDelayMs = {
      p50: nsToMs(this.histogram.percentile(50)),
      p99: nsToMs(this.histogram.percentile(99)),
      max: nsToMs(this.histogram.max),
    };
    return this.series;
  }

  private sample(lagMs: number): void {
    const i = this.series.count;
    if (i >= this.capacity) return;
    const status = this.subjects.worker.getStatus();
    const pool = this.subjects.ledger;
    const tryDepth = stepBatchDepth(pool, 'try');
    const confirmDepth = stepBatchDepth(pool, 'confirm');
    const values: Record<GaugeName, number> = {
      workflowActivations: status.numInFlightWorkflowActivations,
      localActivities: status.numInFlightLocalActivities,
      remoteActivities: status.numInFlightNonLocalActivities,
      workflowPollOutstanding: status.hasOutstandingWorkflowPoll ? 1 : 0,
      ledgerPoolTotal: pool.totalCount,
      ledgerPoolIdle: pool.idleCount,
      ledgerPoolWaiting: pool.waitingCount,
      tryQueued: tryDepth.waiting,
      tryInFlight: tryDepth.inFlight,
      confirmQueued: confirmDepth.waiting,
      confirmInFlight: confirmDepth.inFlight,
      eventLoopLagMs: lagMs,
      mainGcMs: this.gcMsSinceSample,
    };
    this.gcMsSinceSample = 0;
    this.series.atMs[i] = epochNowMs();
    for (const name of gaugeNames) this.series.gauges[name][i] = values[name];
    const usage = process.cpuUsage();
    this.series.cpu.thisProcessCpuS[i] = (usage.user + usage.system) / 1e6;
    this.series.cpu.temporalCpuS[i] = this.lastTemporalCpuS;
    this.series.cpu.machineBusyS[i] = this.lastMachineBusyS;
    this.series.count = i + 1;
    this.refreshProcCpu();
  }

  /** /proc is read off the sampling path: a sample carries the latest reading, at most one interval old. */
  private refreshProcCpu(): void {
    const pid = this.subjects.temporalPid;
    if (this.reading) return;
    this.reading = true;
    void Promise.all([pid === null ? Number.NaN : processCpuSeconds(pid), machineBusySeconds()]).then(
      ([temporalSeconds, machineSeconds]) => {
        this.lastTemporalCpuS = temporalSeconds;
        this.lastMachineBusyS = machineSeconds;
        this.reading = false;
      },
      () => {
        this.reading = false;
      },
    );
  }
}

/** Mean and maximum of a gauge over [fromMs, toMs]; the nearest sample when no sample falls inside. */
export function gaugeOver(series: GaugeSeries, name: GaugeName, fromMs: number, toMs: number): { mean: number; max: number } {
  const [first, last] = sampleRange(series, fromMs, toMs);
  const column = series.gauges[name];
  let sum = 0;
  let max = Number.NEGATIVE_INFINITY;
  for (let i = first; i <= last; i++) {
    sum += column[i]!;
    max = Math.max(max, column[i]!);
  }
  return { mean: sum / (last - first + 1), max };
}

/** Percent of one core a CPU counter advanced over [fromMs, toMs], widened to at least `minWindowMs` around it. */
export function cpuPercentOver(series: GaugeSeries, name: CpuCounterName, fromMs: number, toMs: number, minWindowMs = 100): number {
  const widen = Math.max(0, minWindowMs - (toMs - fromMs)) / 2;
  const [first, last] = sampleRange(series, fromMs - widen, toMs + widen);
  if (last <= first) return Number.NaN;
  const column = series.cpu[name];
  const seconds = column[last]! - column[first]!;
  const wallS = (series.atMs[last]! - series.atMs[first]!) / 1000;
  return wallS > 0 ? (seconds / wallS) * 100 : Number.NaN;
}

/** Indexes of the first and last samples inside [fromMs, toMs] (the one nearest when none is). */
function sampleRange(series: GaugeSeries, fromMs: number, toMs: number): [number, number] {
  const n = series.count;
  if (n === 0) return [0, -1];
  const lowerBound = (t: number): number => {
    let lo = 0;
    let hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (series.atMs[mid]! < t) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  const first = Math.min(lowerBound(fromMs), n - 1);
  const afterLast = lowerBound(toMs + 1e-9);
  const last = Math.max(first, Math.min(n - 1, afterLast - 1));
  return [first, last];
}
