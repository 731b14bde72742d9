import type { BenchSettings } from '../lib/context.js';
import type { MachineInfo, SoftwareVersions } from '../lib/machine.js';
import type { WorkerTuning } from '../lib/workers.js';
import type { M1Result } from '../scenarios/m1-memory.js';
import type { P1ProviderResult } from '../scenarios/p1-provider.js';
import type { P1Result } from '../scenarios/p1-throughput.js';
import type { P1WebhookResult } from '../scenarios/p1-webhook.js';
import type { P2Result } from '../scenarios/p2-ledger.js';
import type { HotPayeeEndToEnd, HotPayeeLedger } from '../scenarios/p4-hot-payee.js';
import type { P3Result, P5Result } from '../scenarios/p5-p3-latency.js';
import type { ScaleOutResult } from '../scenarios/scale-out.js';
import type { VariantResult } from '../scenarios/variants.js';
import type { TemporalKind } from '../lib/bench-stack.js';
import { ratio } from '../lib/stats.js';

/** Everything one run measured, as written to bench/results/<date>.json. */
export interface BenchResult {
  runId: string;
  label: string | null;
  quick: boolean;
  startedAt: string;
  finishedAt: string;
  machine: MachineInfo;
  versions: SoftwareVersions;
  load: { beforeRun1m: number; waitedMs: number; quietAtStart: boolean; afterRun1m: number };
  setup: {
    placement: 'in-process' | 'process';
    sqlitePragmas: readonly string[] | null;
    eagerStart: boolean;
    baselineActivityKind: 'local' | 'remote';
    /** How ChargeWorkflow ran its ledger steps in this run, read from a charge's history. */
    ledgerStepKind: 'local' | 'remote' | null;
    tuning: WorkerTuning;
    external: { temporal: boolean; database: boolean };
    /** The server the top-level P1/P3/P4/P5/M1 figures were measured on (`dev` when absent: older runs). */
    temporalKind?: TemporalKind;
  };
  settings: BenchSettings;
  p1?: P1Result;
  /** P1 with one webhook endpoint subscribed to every charge event (the primary server only). */
  p1Webhook?: P1WebhookResult;
  /** P1 with a provider in the loop (dev server only). */
  p1Provider?: P1ProviderResult;
  p2?: P2Result;
  p3?: P3Result;
  p4Ledger?: HotPayeeLedger;
  p4EndToEnd?: HotPayeeEndToEnd;
  p5?: P5Result;
  m1?: M1Result;
  variants?: VariantResult[];
  /**
   * With more than one server (--temporal dev,cluster): P1, P3 and P5 of each, in the order run.
   * The first is the same run as the top-level p1/p3/p5 (the figures table's).
   */
  servers?: ServerRun[];
  /** Cluster only: charges/s with 2 worker processes against 1, and what bounds it. */
  scaleOut?: ScaleOutResult;
  figures: Figure[];
  /** Every scenario's end-of-run check held. */
  correct: boolean;
  problems: string[];
}

/** The Temporal-facing scenarios of one server kind, on a fresh server of that kind. */
export interface ServerRun {
  kind: TemporalKind;
  /** How that server was started (binary, storage), as the run logged it. */
  temporal: string;
  ledgerStepKind: 'local' | 'remote' | null;
  p1?: P1Result;
  p3?: P3Result;
  p5?: P5Result;
}

/** One row of the table: a figure, the baseline it is compared with, and the target. */
export interface Figure {
  id: string;
  measures: string;
  value: number;
  unit: string;
  baseline: { measures: string; value: number; unit: string } | null;
  /** value ÷ baseline (or the ratio the target is stated in). */
  ratio: number | null;
  target: string;
  met: boolean | null;
}

const megabyte = 1e6;

export function buildFigures(result: Omit<BenchResult, 'figures' | 'correct' | 'problems'>): Figure[] {
  const figures: Figure[] = [];
  for (const point of result.p1?.points ?? []) {
    figures.push({
      id: 'P1',
      measures: `new charges/s, closed loop, N=${point.concurrency}`,
      value: point.charge.operationsPerSecond,
      unit: 'charges/s',
      baseline: { measures: `bare 3-activity workflow (${result.p1!.baselineActivityKind}), N=${point.concurrency}`, value: point.baseline.operationsPerSecond, unit: 'workflows/s' },
      ratio: point.ratio,
      target: '≥ 0.9',
      met: point.ratio >= 0.9,
    });
    if (point.chargesPerMachineCpuSecond != null && point.baselinePerMachineCpuSecond != null) {
      figures.push({
        id: 'P1',
        measures: `new charges per CPU-second of the whole machine, N=${point.concurrency}`,
        value: point.chargesPerMachineCpuSecond,
        unit: 'charges/CPU-s',
        baseline: { measures: `bare 3-activity workflow per machine CPU-second, N=${point.concurrency}`, value: point.baselinePerMachineCpuSecond, unit: 'workflows/CPU-s' },
        ratio: ratio(point.chargesPerMachineCpuSecond, point.baselinePerMachineCpuSecond),
        target: '—',
        met: null,
      });
    }
  }
  for (const point of result.p1Webhook?.points ?? []) {
    const plain = result.p1?.points.find((p) => p.concurrency === point.concurrency);
    // Judged against P1 with no endpoint of the same run, each over its own bare workflow (the two
    // are not interleaved with each other, so their raw charges/s would carry the run's drift).
    const normalised = plain ? ratio(point.ratio, plain.ratio) : null;
    figures.push({
      id: 'P1-webhook',
      measures: `new charges/s with one webhook endpoint (every charge event, loopback receiver), N=${point.concurrency}; ratio: (charges ÷ bare) ÷ P1's (charges ÷ bare)`,
      value: point.charge.operationsPerSecond,
      unit: 'charges/s',
      baseline: plain ? { measures: `P1 with no endpoint, N=${point.concurrency}; bare workflows ${point.baseline.operationsPerSecond.toFixed(1)}/s and ${plain.baseline.operationsPerSecond.toFixed(1)}/s`, value: plain.charge.operationsPerSecond, unit: 'charges/s' } : null,
      ratio: normalised,
      target: '≥ 0.95',
      met: normalised === null ? null : normalised >= 0.95,
    });
    figures.push({
      id: 'P1-webhook',
      measures: `delivery lag p99 (event created → receiver got it), N=${point.concurrency}`,
      value: point.deliveries.lag.p99Ms,
      unit: 'ms',
      baseline: { measures: 'delivery lag p50', value: point.deliveries.lag.p50Ms, unit: 'ms' },
      ratio: ratio(point.deliveries.lag.p99Ms, point.deliveries.lag.p50Ms),
      target: '—',
      met: null,
    });
  }
  for (const point of result.p2?.points ?? []) {
    const baseline = point.pgbench ?? point.tpcbWithPg;
    figures.push({
      id: 'P2',
      measures: `ledger-only Try+Confirm pairs/s, N=${point.concurrency}`,
      value: point.charge.operationsPerSecond,
      unit: 'pairs/s',
      baseline: {
        measures: `TPC-B (${point.baselineName}, scale ${result.p2!.tpcbScale}), N=${point.concurrency}; pg driver: ${point.tpcbWithPg.operationsPerSecond.toFixed(0)} tps`,
        value: baseline.operationsPerSecond,
        unit: 'tps',
      },
      ratio: point.ratio,
      // A floor, no longer a target: the ledger runs far faster than a charge end to end, so a change
      // is judged by a same-run A/B (no drop below 0.9 × the last published ratio), not by this row.
      target: 'floor: A/B ≥ 0.9× last published',
      met: null,
    });
  }
  if (result.p3) {
    const p3 = result.p3;
    figures.push({
      id: 'P3',
      measures: 'replay of a finished key, p50 latency',
      value: p3.sequential.latency.p50Ms,
      unit: 'ms',
      baseline: { measures: 'new charge p50 (P5 idle)', value: p3.newChargeP50Ms, unit: 'ms' },
      ratio: p3.p50Ratio,
      target: '≤ 0.1',
      met: p3.p50Ratio <= 0.1,
    });
    figures.push({
      id: 'P3',
      measures: 'replay p99 latency',
      value: p3.sequential.latency.p99Ms,
      unit: 'ms',
      baseline: { measures: 'new charge p99 (P5 idle)', value: result.p5?.idle.latency.p99Ms ?? Number.NaN, unit: 'ms' },
      ratio: ratio(p3.sequential.latency.p99Ms, result.p5?.idle.latency.p99Ms ?? Number.NaN),
      target: '—',
      met: null,
    });
    const newAtSameN = result.p1?.points.find((p) => p.concurrency === p3.concurrent.concurrency);
    figures.push({
      id: 'P3',
      measures: `replays/s, N=${p3.concurrent.concurrency}`,
      value: p3.concurrent.operationsPerSecond,
      unit: 'replays/s',
      baseline: newAtSameN
        ? { measures: `new charges/s, N=${newAtSameN.concurrency} (P1)`, value: newAtSameN.charge.operationsPerSecond, unit: 'charges/s' }
        : null,
      ratio: newAtSameN ? ratio(p3.concurrent.operationsPerSecond, newAtSameN.charge.operationsPerSecond) : null,
      target: '—',
      met: null,
    });
    const calls = p3.temporalCallsDuringReplays;
    const callsText = calls === null ? 'not measured' : Object.keys(calls).length === 0 ? 'none' : Object.entries(calls).map(([op, n]) => `${op} ${n}`).join(', ');
    figures.push({
      id: 'P3',
      measures: `workflow + query tasks executed during all ${p3.sequential.completed + p3.concurrent.completed} replays (server metrics); other Temporal calls: ${callsText}`,
      value: p3.workflowTasksDuringReplays ?? Number.NaN,
      unit: 'tasks',
      baseline: null,
      ratio: null,
      target: '= 0',
      met: p3.workflowTasksDuringReplays === null ? null : p3.workflowTasksDuringReplays === 0,
    });
  }
  if (result.p4Ledger) {
    const p4 = result.p4Ledger;
    figures.push({
      id: 'P4',
      measures: `hot payee (+10 payers take 90%), ledger-only pairs/s, N=${p4.concurrency}`,
      value: p4.hot.operationsPerSecond,
      unit: 'pairs/s',
      baseline: { measures: 'spread traffic, same layer and N', value: p4.spread.operationsPerSecond, unit: 'pairs/s' },
      ratio: p4.ratio,
      target: '≥ 0.9',
      met: p4.ratio >= 0.9,
    });
  }
  if (result.p4EndToEnd) {
    const p4 = result.p4EndToEnd;
    figures.push({
      id: 'P4',
      measures: `hot payee (+10 payers take 90%), end to end charges/s, N=${p4.concurrency}`,
      value: p4.hot.operationsPerSecond,
      unit: 'charges/s',
      baseline: { measures: 'spread traffic, same layer and N', value: p4.spread.operationsPerSecond, unit: 'charges/s' },
      ratio: p4.ratio,
      target: '≥ 0.95',
      met: p4.ratio >= 0.95,
    });
  }
  if (result.p5) {
    const p5 = result.p5;
    figures.push({
      id: 'P5',
      measures: `idle end-to-end latency p50 (${p5.idle.completed} charges, one at a time)`,
      value: p5.idle.latency.p50Ms,
      unit: 'ms',
      ...(p5.idleBare && p5.idleP50OverBareP50 !== undefined
        ? {
            baseline: { measures: `bare 3-activity workflow, one at a time (${p5.idleBare.completed})`, value: p5.idleBare.latency.p50Ms, unit: 'ms' },
            ratio: p5.idleP50OverBareP50,
            target: '≤ 1.15',
            met: p5.idleP50OverBareP50 <= 1.15,
          }
        : { baseline: null, ratio: null, target: '≤ 30 ms', met: p5.idle.latency.p50Ms <= 30 }),
    });
    figures.push({
      id: 'P5',
      measures: 'idle end-to-end latency p99',
      value: p5.idle.latency.p99Ms,
      unit: 'ms',
      baseline: null,
      ratio: null,
      target: '—',
      met: null,
    });
    figures.push({
      id: 'P5',
      measures: `p99 at half of peak (${(p5.peakChargesPerSecond / 2).toFixed(0)} charges/s offered, Poisson)`,
      value: p5.halfLoad.latency.p99Ms,
      unit: 'ms',
      baseline: { measures: 'idle p50', value: p5.idle.latency.p50Ms, unit: 'ms' },
      ratio: p5.halfLoadP99OverIdleP50,
      target: '≤ 3',
      met: p5.halfLoadP99OverIdleP50 <= 3,
    });
    if (p5.bareHalfLoad && p5.idleBare && p5.bareHalfLoadP99OverIdleP50 !== undefined) {
      figures.push({
        id: 'P5',
        measures: 'the bare workflow: p99 at half of its own peak, Poisson (what the engine alone shows)',
        value: p5.bareHalfLoad.latency.p99Ms,
        unit: 'ms',
        baseline: { measures: 'the bare workflow idle p50', value: p5.idleBare.latency.p50Ms, unit: 'ms' },
        ratio: p5.bareHalfLoadP99OverIdleP50,
        target: '—',
        met: null,
      });
    }
  }
  if (result.scaleOut) {
    const scale = result.scaleOut;
    figures.push({
      id: 'Scale-out',
      measures: `cluster: new charges/s, closed loop N=${scale.concurrency}, workers in 2 processes; bound: ${scale.bound.kind}`,
      value: scale.twoProcesses.operationsPerSecond,
      unit: 'charges/s',
      baseline: { measures: 'same load, workers in 1 process', value: scale.oneProcess.operationsPerSecond, unit: 'charges/s' },
      ratio: scale.ratio,
      target: '—',
      met: null,
    });
  }
  if (result.m1) {
    const m1 = result.m1;
    figures.push({
      id: 'M1',
      measures: `worker RSS with ${m1.inFlight} manual-capture charges in flight (cache ${m1.maxCachedWorkflows}, MALLOC_ARENA_MAX=${m1.mallocArenaMax})`,
      value: m1.inFlightRssBytes / megabyte,
      unit: 'MB',
      baseline: { measures: 'same worker process, idle', value: m1.idleRssBytes / megabyte, unit: 'MB' },
      ratio: null,
      target: '≤ 300 MB',
      met: m1.inFlightRssBytes <= 300 * megabyte,
    });
  }
  return figures;
}
