/**
 * Where the slowest 1% of charges wait at half load. Not part of `npm run bench`: run it with
 * `npx tsx bench/experiments/tail-breakdown.ts [options]` (--help lists them) on a quiet machine.
 *
 * On a fresh bench stack, with P5's charge path (an in-process worker with the bench's tuning, eager
 * start, ChargeService.charge), it runs P5's half load (Poisson arrivals, latency from the scheduled
 * arrival) at --rate, or at half the peak a short closed loop at N=32 finds (as P1 measures it), and
 * marks every charge: scheduled arrival, charge accepted, start call sent and returned (a client
 * interceptor), Try and Confirm start and end (an activity interceptor on the worker: the steps
 * are local activities, which go through it too), result delivered; after the load it reads the
 * histories of the slowest 1% and a random sample of the others for when the first workflow task
 * started and the workflow completed (the server's clock, the same machine's). Meanwhile a sampler
 * reads every ~10 ms the worker's activations and activities in flight, the worker's ledger pool
 * (total, idle, waiting), the Try and Confirm step batchers' queues, the event loop's delay and the
 * Temporal server's CPU.
 *
 * It prints each stage's p50 and p99 for all charges and for the slowest 1%, then which stage
 * carries the slow charges' excess over the median and the gauges during that stage, beside the same
 * stage of the sampled ordinary charges; --json writes everything, each slow charge's marks included.
 *
 * What it found (dev server, 2 shared cores, load average 3-4 from other work): at 51.4/s (half of
 * a 102.8/s peak) p50 39.6 ms, p99 206 ms, 11.4× the idle p50 of 18.1 ms. The slowest 1% (77)
 * averaged 275 ms; three quarters of their excess over the median was inside the Temporal server
 * (the start call reaching it 11%, its persisting of the start before the reply 21%, the workflow
 * task's completion 21%, the result's delivery 22%), a fifth in the worker's workflow thread (3-8
 * activations in flight against 1), the ledger 7% (no pool wait, no batcher queue). They came in a
 * few episodes of a second or two, with Temporal at 90-136% of a core and the machine near its two
 * cores. With synchronous=OFF at 41.6/s p99 fell from 268 ms to 136 ms: the server-side stages
 * went, the workflow-thread ones stayed.
 */
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { chargeWorkflowId } from '../../src/domain/charge.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { defaultSqlitePragmas } from '../../src/stack/temporal-dev-server.js';
import { bundleChargeWorkflows } from '../../src/worker/charge-worker.js';
import { defaultTuning } from '../run.js';
import { startBenchStack, temporalKinds, type TemporalKind } from '../lib/bench-stack.js';
import { ChargeTally, spreadChargeOperation, settleUnsettled } from '../lib/charging.js';
import { ChargeTimeline, epochNowMs, toEpochMs, type ChargeMarks } from '../lib/charge-timeline.js';
import { fullSettings, type BenchContext } from '../lib/context.js';
import { GaugeSampler, gaugeNames, type GaugeSeries } from '../lib/gauge-sampler.js';
import { seedLedgerHistory } from '../lib/history.js';
import { openInstrumentedSession } from '../lib/instrumented-session.js';
import { runBounded, runClosedLoop, runOpenLoop, type Operation, type PhaseResult } from '../lib/load.js';
import { loadAverage1m } from '../lib/machine.js';
import { openPopulation } from '../lib/population.js';
import { percentileOfSorted, summariseLatencies } from '../lib/stats.js';
import { verifyScenario } from '../lib/verify.js';
import {
  breakDownTail,
  chainStages,
  episodesOf,
  slowest,
  spanStages,
  stageFigures,
  type ChargeRecord,
  type GaugeMedians,
  type StageFigure,
} from '../lib/tail-analysis.js';
import { readManyWorkflowMarks } from '../lib/workflow-marks.js';
import { spreadPopulationSize } from '../scenarios/p1-throughput.js';

Runtime.install({ logger: new DefaultLogger('WARN') });

const program = new Command()
  .name('tail-breakdown')
  .option('--rate <charges/s>', 'offered load; default: half the peak of a closed loop at N=32')
  .option('--duration-s <s>', 'measured seconds of the half load', '60')
  .option('--warmup-s <s>', 'seconds of the half load before the measured window', '5')
  .option('--peak-s <s>', 'measured seconds of the peak probe (after 2 s of warm-up)', '10')
  .option('--sqlite-pragma <pragma>', `dev server SQLite pragma NAME=VALUE (repeatable; default: ${defaultSqlitePragmas.join(' ')})`, (value: string, previous: string[]) => [...previous, value], [] as string[])
  .option('--temporal <kind>', `Temporal server (${temporalKinds.join(' | ')})`, 'dev')
  .option('--history-sample <n>', 'histories read besides the slowest 1%: a random sample of the other charges', '100')
  .option('--idle-charges <n>', 'charges one at a time before the load, for the idle p50 the target compares with', '100')
  .option('--interval-ms <ms>', 'gauge sampling interval', '10')
  .option('--json <file>', 'write everything measured here')
  .option('--series <file>', 'write every gauge sample here (epoch ms, gauges, CPU seconds), for a closer look at an episode')
  .parse();
const flags = program.opts<{
  rate?: string; durationS: string; warmupS: string; peakS: string; temporal: string; historySample: string;
  idleCharges: string; intervalMs: string; json?: string; series?: string; sqlitePragma: string[];
}>();

function positiveNumber(value: string, flag: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${flag} must be a positive number, not ${value}`);
  return n;
}
function count(value: string, flag: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${flag} must be a whole number, not ${value}`);
  return n;
}
if (!temporalKinds.includes(flags.temporal as TemporalKind)) throw new Error(`--temporal must be one of ${temporalKinds.join(', ')}`);
const temporalKind = flags.temporal as TemporalKind;
const durationMs = positiveNumber(flags.durationS, '--duration-s') * 1000;
const warmupMs = count(flags.warmupS, '--warmup-s') * 1000;
const peakMs = positiveNumber(flags.peakS, '--peak-s') * 1000;
const historySample = count(flags.historySample, '--history-sample');
const idleCharges = count(flags.idleCharges, '--idle-charges');
const intervalMs = positiveNumber(flags.intervalMs, '--interval-ms');
for (const pragma of flags.sqlitePragma) {
  if (!/^[a-z_]+=[A-Za-z0-9_]+$/.test(pragma)) throw new Error(`--sqlite-pragma ${pragma}: expected NAME=VALUE`);
}
const sqlitePragmas = flags.sqlitePragma.length > 0 ? flags.sqlitePragma : [...defaultSqlitePragmas];
const askedRate = flags.rate === undefined ? null : positiveNumber(flags.rate, '--rate');
const peakConcurrency = 32;
const slowFraction = 0.01;

const log = (line: string): void => void process.stderr.write(`${line}\n`);
const runId = new Date().toISOString().replace(/[-:]/g, '').slice(2, 13).toLowerCase();
const dataDir = join(tmpdir(), `chargeguard-tail-${process.pid}`);
const loadAtStart = loadAverage1m();
const stack = await startBenchStack({ dataDir, sqlitePragmas, temporalKind, keepData: false, log });
const setupLedger = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 8, statementTimeoutMs: 600_000 });
const ctx: BenchContext = { runId, settings: fullSettings, stack, ledger: setupLedger, log };
let report: Report;
try {
  log(`giving the fresh ledger ${fullSettings.historyCharges} charges of history and statistics`);
  await seedLedgerHistory(ctx, fullSettings.historyCharges);
  const chargeBundlePath = join(dataDir, 'charge-workflows.js');
  await writeFile(chargeBundlePath, (await bundleChargeWorkflows()).code);
  const timeline = new ChargeTimeline();
  const session = await openInstrumentedSession(stack, { taskQueue: `tail-${runId}-charges`, chargeBundlePath, tuning: defaultTuning, timeline });
  try {
    const population = await openPopulation(setupLedger, { tenant: `tail-${runId}`, ...spreadPopulationSize });
    const tally = new ChargeTally();
    const newCharge = (keyPrefix: string): Operation => spreadChargeOperation(session.charges, population, tally, keyPrefix);
    await runBounded(20, 1, newCharge('warmup'));
    const idle = idleCharges === 0
      ? null
      : await runClosedLoop({ label: 'idle, one charge at a time', concurrency: 1, warmupMs: 0, durationMs: 300_000, maxOperations: idleCharges, operation: newCharge('idle') });
    const peak = askedRate === null
      ? await runClosedLoop({
        label: `peak probe N=${peakConcurrency}`,
        concurrency: peakConcurrency,
        warmupMs: 2_000,
        durationMs: peakMs,
        maxOperations: 200_000,
        operation: newCharge('peak'),
      })
      : null;
    const ratePerSecond = askedRate ?? Math.max(1, peak!.operationsPerSecond / 2);
    timeline.byWorkflowId.clear();

    const inner = newCharge('half');
    const operation: Operation = async (sequence, scheduledAtMs) => {
      const marks = timeline.marks(chargeWorkflowId(population.tenant, `half-${sequence}`));
      marks.scheduledMs = toEpochMs(scheduledAtMs ?? performance.now());
      marks.acceptedMs = epochNowMs();
      try {
        await inner(sequence);
        marks.ok = true;
      } catch (error) {
        marks.ok = false;
        throw error;
      } finally {
        marks.deliveredMs = epochNowMs();
      }
    };
    const sampler = new GaugeSampler(
      { worker: session.worker, ledger: session.workerLedger, temporalPid: stack.serverPids.temporal },
      intervalMs,
      warmupMs + durationMs + 120_000,
    );
    const windowStartMs = epochNowMs() + warmupMs;
    sampler.start();
    let halfLoad: PhaseResult;
    let series: GaugeSeries;
    try {
      halfLoad = await runOpenLoop({
        label: `half load (${ratePerSecond.toFixed(1)}/s offered)`,
        ratePerSecond,
        warmupMs,
        durationMs,
        maxInFlight: 512,
        operation,
      });
    } finally {
      series = sampler.stop();
    }
    if (flags.series !== undefined) await writeSeries(flags.series, series, windowStartMs);
    await settleUnsettled(session.charges, population.tenant, tally);
    const verification = await verifyScenario(setupLedger, population.tenant, tally.succeeded);

    const measured = [...timeline.byWorkflowId.values()].filter((m) => m.scheduledMs !== undefined && m.scheduledMs >= windowStartMs);
    const slow = slowest(measured, slowFraction);
    const slowIds = new Set(slow.map((m) => m.workflowId));
    const others = measured.filter((m) => m.ok === true && !slowIds.has(m.workflowId));
    const sample = sampleOf(others, historySample);
    log(`reading ${slow.length + sample.length} workflow histories`);
    const histories = await readManyWorkflowMarks(session.temporal, [...slow, ...sample].map((m) => m.workflowId));
    const withHistory = (m: ChargeMarks): ChargeRecord => ({ ...m, ...histories.get(m.workflowId) });
    const sampleIds = new Set(sample.map((m) => m.workflowId));
    // History stages of "all" come from the random sample alone, so the slow charges do not skew them.
    const all = measured.map((m) => (sampleIds.has(m.workflowId) ? withHistory(m) : { ...m }));
    const slowRecords = slow.map(withHistory);
    const sampleRecords = sample.map(withHistory);
    report = {
      runId,
      temporal: stack.temporalDescription,
      loadAverage1m: { atStart: loadAtStart, atEnd: loadAverage1m() },
      tuning: defaultTuning,
      idle: idle === null ? null : idle.latency,
      peak: peak === null ? null : { concurrency: peakConcurrency, chargesPerSecond: peak.operationsPerSecond, latency: peak.latency },
      ratePerSecond,
      halfLoad: { ...halfLoad, latencyRatioP99OverIdleP50: idle === null ? null : halfLoad.latency.p99Ms / idle.latency.p50Ms },
      verification: { ok: verification.ok, problems: verification.problems },
      charges: { measured: measured.length, failed: measured.filter((m) => m.ok !== true).length, slow: slow.length, historiesRead: histories.size },
      stagesAll: stageFigures(all, [...chainStages, ...spanStages]),
      stagesSlow: stageFigures(slowRecords, [...chainStages, ...spanStages]),
      tail: breakDownTail(all, slowRecords, sampleRecords, series),
      slowEpisodes: episodesOf(slowRecords, windowStartMs),
      gaugesOverall: summariseSeries(series),
      slowCharges: slowRecords,
      sampleCharges: sampleRecords,
    };
  } finally {
    await session.close();
  }
} finally {
  await setupLedger.end();
  await stack.stop();
}

interface Report {
  runId: string;
  temporal: string;
  loadAverage1m: { atStart: number; atEnd: number };
  tuning: typeof defaultTuning;
  idle: ReturnType<typeof summariseLatencies> | null;
  peak: { concurrency: number; chargesPerSecond: number; latency: ReturnType<typeof summariseLatencies> } | null;
  ratePerSecond: number;
  halfLoad: PhaseResult & { latencyRatioP99OverIdleP50: number | null };
  verification: { ok: boolean; problems: string[] };
  charges: { measured: number; failed: number; slow: number; historiesRead: number };
  stagesAll: StageFigure[];
  stagesSlow: StageFigure[];
  tail: ReturnType<typeof breakDownTail>;
  /** Seconds after the measured window opened at which slow charges arrived, grouped. */
  slowEpisodes: ReturnType<typeof episodesOf>;
  gaugesOverall: ReturnType<typeof summariseSeries>;
  slowCharges: ChargeRecord[];
  sampleCharges: ChargeRecord[];
}

/** Columns of the samples, times as seconds into the measured window. */
async function writeSeries(path: string, series: GaugeSeries, originMs: number): Promise<void> {
  const take = (column: Float64Array): number[] => Array.from(column.subarray(0, series.count), (v) => Math.round(v * 1000) / 1000);
  const atS = Array.from(series.atMs.subarray(0, series.count), (t) => Math.round(t - originMs) / 1000);
  const columns = {
    atS,
    ...Object.fromEntries(Object.entries(series.gauges).map(([name, column]) => [name, take(column)])),
    ...Object.fromEntries(Object.entries(series.cpu).map(([name, column]) => [name, take(column)])),
  };
  await writeFile(path, `${JSON.stringify(columns)}\n`);
}

/** A reproducible random sample (a fixed seed): the same run picks the same charges. */
function sampleOf<T>(items: readonly T[], n: number): T[] {
  const copy = [...items];
  let state = 0x7a11;
  const random = (): number => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state / 4294967296;
  };
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [copy[i], copy[j]] = [copy[j]!, copy[i]!];
  }
  return copy.slice(0, n);
}

function summariseSeries(series: GaugeSeries) {
  const gauges = Object.fromEntries(
    gaugeNames.map((name) => {
      const values = Array.from(series.gauges[name].subarray(0, series.count)).sort((a, b) => a - b);
      const mean = values.reduce((s, v) => s + v, 0) / Math.max(1, values.length);
      return [name, { mean, p50: percentileOfSorted(values, 0.5), p99: percentileOfSorted(values, 0.99), max: values[values.length - 1] ?? Number.NaN }];
    }),
  );
  const n = series.count;
  const wallS = n > 1 ? (series.atMs[n - 1]! - series.atMs[0]!) / 1000 : Number.NaN;
  const cpu = (column: Float64Array): number => (n > 1 ? ((column[n - 1]! - column[0]!) / wallS) * 100 : Number.NaN);
  return {
    samples: n,
    intervalMs: series.intervalMs,
    gauges,
    eventLoopDelayMs: series.eventLoopDelayMs,
    cpuPercent: { temporal: cpu(series.cpu.temporalCpuS), thisProcess: cpu(series.cpu.thisProcessCpuS), machineBusy: cpu(series.cpu.machineBusyS) },
  };
}

const ms = (v: number): string => (Number.isFinite(v) ? `${v.toFixed(1)}` : 'n/a');
const lines: string[] = [];
const r = report!;
lines.push(
  `\nTail breakdown, run ${r.runId}: ${r.temporal}; in-process worker, eager start, tuning ${JSON.stringify(r.tuning)}; ` +
    `load average ${r.loadAverage1m.atStart.toFixed(2)} at start, ${r.loadAverage1m.atEnd.toFixed(2)} at end`,
);
if (r.peak) lines.push(`peak probe N=${r.peak.concurrency}: ${r.peak.chargesPerSecond.toFixed(1)} charges/s`);
if (r.idle) lines.push(`idle, one at a time: p50 ${ms(r.idle.p50Ms)} ms, p99 ${ms(r.idle.p99Ms)} ms (${r.idle.count} charges)`);
lines.push(
  `half load: ${r.ratePerSecond.toFixed(1)}/s offered, ${r.halfLoad.completed} charges in ${(r.halfLoad.windowMs / 1000).toFixed(0)} s, ${r.halfLoad.failed} failed, ` +
    `${r.halfLoad.shed ?? 0} shed; p50 ${ms(r.halfLoad.latency.p50Ms)} ms, p99 ${ms(r.halfLoad.latency.p99Ms)} ms` +
    (r.halfLoad.latencyRatioP99OverIdleP50 === null ? '' : ` (${r.halfLoad.latencyRatioP99OverIdleP50.toFixed(1)}× the idle p50)`),
);
lines.push(`ledger check: ${r.verification.ok ? 'ok' : r.verification.problems.join('; ')}; histories read: ${r.charges.historiesRead} (slowest ${r.charges.slow} + a sample)`);
lines.push('', '| stage (ms) | all: n | p50 | p99 | slowest 1%: n | p50 | p99 |', '|---|---:|---:|---:|---:|---:|---:|');
r.stagesAll.forEach((a, i) => {
  const s = r.stagesSlow[i]!;
  lines.push(`| ${a.stage} | ${a.count} | ${ms(a.p50Ms)} | ${ms(a.p99Ms)} | ${s.count} | ${ms(s.p50Ms)} | ${ms(s.p99Ms)} |`);
});
lines.push(
  '',
  `Slowest 1% (${r.tail.slowCount}): mean ${ms(r.tail.slowMeanTotalMs)} ms against a median of ${ms(r.tail.medianTotalMs)} ms. Where their excess goes:`,
  '',
  '| stage | median of the others | slow median | mean excess | share | dominant in |',
  '|---|---:|---:|---:|---:|---:|',
);
for (const s of r.tail.stages) {
  lines.push(`| ${s.stage} | ${ms(s.medianMs)} | ${ms(s.slowMedianMs)} | ${ms(s.meanExcessMs)} | ${(s.shareOfExcess * 100).toFixed(0)}% | ${s.dominantIn} |`);
}
lines.push(
  '',
  `The slow charges arrived in ${r.slowEpisodes.length} episodes (seconds into the window, charges): ` +
    r.slowEpisodes.map((e) => `${e.atS.toFixed(1)} s (${e.charges})`).join(', '),
);
const gaugeColumns = ['workflowActivations', 'localActivities', 'ledgerPoolWaiting', 'ledgerPoolIdle', 'tryQueued', 'confirmQueued', 'eventLoopLagMs', 'mainGcMs'] as const;
const gaugeCells = (g: GaugeMedians | null): string =>
  g === null
    ? gaugeColumns.map(() => 'n/a').concat(['n/a', 'n/a', 'n/a']).join(' | ')
    : gaugeColumns.map((name) => `${g.gauges[name].mean.toFixed(1)} (${g.gauges[name].max.toFixed(0)})`)
      .concat([g.cpuPercent.temporalCpuS.toFixed(0), g.cpuPercent.thisProcessCpuS.toFixed(0), g.cpuPercent.machineBusyS.toFixed(0)])
      .join(' | ');
lines.push(
  '',
  'Gauges during the dominant stage (median over the slow charges it dominates of each window\'s mean, and (max)), beside the same stage of the sampled ordinary charges:',
  '',
  `| stage | charges | ${gaugeColumns.join(' | ')} | Temporal CPU % | this process CPU % | machine busy % (all cores) |`,
  `|---|---|${gaugeColumns.map(() => '---:').join('|')}|---:|---:|---:|`,
);
for (const s of r.tail.stages.filter((x) => x.dominantIn > 0)) {
  lines.push(`| ${s.stage} | slow (${s.gaugesWhenDominant?.windows ?? 0}) | ${gaugeCells(s.gaugesWhenDominant)} |`);
  lines.push(`| | sample (${s.gaugesInSample?.windows ?? 0}) | ${gaugeCells(s.gaugesInSample)} |`);
}
const o = r.gaugesOverall;
lines.push(
  '',
  `Over the whole load (${o.samples} samples every ${o.intervalMs} ms): Temporal CPU ${ms(o.cpuPercent.temporal)}%, this process ${ms(o.cpuPercent.thisProcess)}%, machine ${ms(o.cpuPercent.machineBusy)}% of one core; ` +
    `event-loop delay p50 ${ms(o.eventLoopDelayMs.p50)} ms, p99 ${ms(o.eventLoopDelayMs.p99)} ms, max ${ms(o.eventLoopDelayMs.max)} ms`,
  '',
  '| gauge | mean | p50 | p99 | max |',
  '|---|---:|---:|---:|---:|',
);
for (const [name, g] of Object.entries(o.gauges)) lines.push(`| ${name} | ${g.mean.toFixed(2)} | ${g.p50.toFixed(1)} | ${g.p99.toFixed(1)} | ${g.max.toFixed(1)} |`);
process.stdout.write(`${lines.join('\n')}\n`);
if (flags.json !== undefined) {
  await writeFile(flags.json, `${JSON.stringify(r, null, 2)}\n`);
  log(`written: ${flags.json}`);
}
if (!r.verification.ok) process.exitCode = 1;
