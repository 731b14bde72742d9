/**
 * What outbound events cost a charge end to end: P1 of this tree (with no endpoint, and with one
 * webhook endpoint subscribed to every charge event) against P1 of a checkout from before events
 * existed, runs alternated A B A B so the machine's load falls on both alike. Not part of
 * `npm run bench`: run it with
 * `npx tsx bench/experiments/p1-events-ab.ts <worktree of the older commit> [rounds] [phase-seconds]`
 * (3 rounds and 5-second phases by default). The older checkout needs its own `npm ci`. Each run is
 * `bench/main.ts --temporal dev --phase-s <s>` on fresh servers: `--only p1` for A, `--only
 * p1,p1-webhook` for B; neither waits for a quiet machine (both sides see the same load, and the
 * 1-minute load average before and after each run is printed beside it). Every figure is a run's
 * charges/s over the bare workflow of the same run (docs/bench.md); the summary gives, per N, the
 * medians of each side and their ratios, and each round's ratio to the A run next to it.
 * `--summary <results folder>...` prints the summary again over the runs of earlier invocations
 * (each folder's before/ and this/ runs, paired in the order they ran), without running anything.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { BenchResult } from '../report/result.js';
import { benchRun, fixed, load, median, type Run } from './bench-run.js';

const summaryOnly = process.argv[2] === '--summary';
const beforeTree = process.argv[2];
if (!beforeTree) throw new Error('usage: p1-events-ab.ts <worktree of the older commit> [rounds] [phase-seconds] | --summary <results folder>...');
const rounds = summaryOnly ? 0 : Number(process.argv[3] ?? 3);
const phaseSeconds = summaryOnly ? 0 : Number(process.argv[4] ?? 5);
const outRoot = resolve('.data/p1-events-ab', new Date().toISOString().replace(/[-:]/g, '').slice(0, 13));



/** The runs an earlier invocation wrote in `folder`, A and B alternating in the order they ran; its loads are in the results. */
async function earlierRuns(folder: string): Promise<Run[]> {
  const read = async (side: 'A' | 'B'): Promise<Run[]> => {
    const dir = join(folder, side === 'A' ? 'before' : 'this');
    const names = (await readdir(dir)).filter((name) => name.endsWith('.json')).sort();
    return Promise.all(names.map(async (name) => {
      const result = JSON.parse(await readFile(join(dir, name), 'utf8')) as BenchResult;
      return { side, loadBefore: result.load.beforeRun1m.toFixed(2), loadAfter: result.load.afterRun1m.toFixed(2), result };
    }));
  };
  const [a, b] = [await read('A'), await read('B')];
  return a.flatMap((run, i) => (b[i] ? [run, b[i]] : []));
}

const runs: Run[] = summaryOnly ? (await Promise.all(process.argv.slice(3).map(earlierRuns))).flat() : [];
for (let round = 1; round <= rounds; round += 1) {
  for (const side of ['A', 'B'] as const) {
    const loadBefore = load();
    const result = side === 'A'
      ? await benchRun(resolve(beforeTree), { only: 'p1', phaseSeconds, outDir: join(outRoot, 'before'), label: `p1-events-ab round ${round}: before events` })
      : await benchRun(process.cwd(), { only: 'p1,p1-webhook', phaseSeconds, outDir: join(outRoot, 'this'), label: `p1-events-ab round ${round}: this tree` });
    const run = { side, loadBefore, loadAfter: load(), result };
    runs.push(run);
    process.stderr.write(`round ${round} ${side}: commit ${result.versions.gitCommit}, load ${run.loadBefore} -> ${run.loadAfter}, correct ${result.correct}\n`);
  }
}

const concurrencies = runs[0]!.result.p1!.points.map((p) => p.concurrency);
const sideRuns = (side: 'A' | 'B') => runs.filter((r) => r.side === side);
const p1Ratio = (run: Run, n: number) => run.result.p1?.points.find((p) => p.concurrency === n)?.ratio ?? Number.NaN;
const webhookPoint = (run: Run, n: number) => run.result.p1Webhook?.points.find((p) => p.concurrency === n);

const lines: string[] = [];
lines.push(`# P1 before events (A: ${sideRuns('A')[0]!.result.versions.gitCommit}) and this tree (B: ${sideRuns('B')[0]!.result.versions.gitCommit}), ${runs.length / 2} rounds A B, ${sideRuns('A')[0]!.result.settings.durationMs / 1000} s phases`);
lines.push('', '| round | side | 1-min load before / after | correct | P1 ÷ bare per N | one endpoint ÷ bare per N |', '|---:|---|---|---|---|---|');
runs.forEach((run, index) => {
  lines.push(
    `| ${Math.floor(index / 2) + 1} | ${run.side} | ${run.loadBefore.split(' ')[0]} / ${run.loadAfter.split(' ')[0]} | ${run.result.correct} | ${concurrencies.map((n) => fixed(p1Ratio(run, n))).join(' / ')} | ${run.side === 'B' ? concurrencies.map((n) => fixed(webhookPoint(run, n)?.ratio)).join(' / ') : '—'} |`,
  );
});
lines.push(
  '',
  '| N | A: P1 ÷ bare (median) | B: P1 ÷ bare | B: one endpoint ÷ bare | B P1 ÷ A | B one endpoint ÷ A | per round, one endpoint ÷ A | charges/s A / B P1 / B endpoint (medians) | lag p50 / p99 ms (medians) | delivered, duplicates |',
  '|---:|---:|---:|---:|---:|---:|---|---|---|---|',
);
for (const n of concurrencies) {
  const a = sideRuns('A').map((run) => p1Ratio(run, n));
  const bPlain = sideRuns('B').map((run) => p1Ratio(run, n));
  const bHook = sideRuns('B').map((run) => webhookPoint(run, n)?.ratio ?? Number.NaN);
  const perRound = bHook.map((value, i) => value / a[i]!);
  const rate = (side: 'A' | 'B', pick: (run: Run) => number | undefined) => median(sideRuns(side).map((run) => pick(run) ?? Number.NaN));
  const points = sideRuns('B').map((run) => webhookPoint(run, n));
  const delivered = points.reduce((sum, p) => sum + (p?.deliveries.delivered ?? 0), 0);
  const events = points.reduce((sum, p) => sum + (p?.deliveries.events ?? 0), 0);
  const duplicates = points.reduce((sum, p) => sum + (p?.deliveries.duplicates ?? 0), 0);
  lines.push(
    `| ${n} | ${fixed(median(a))} | ${fixed(median(bPlain))} | ${fixed(median(bHook))} | ${fixed(median(bPlain) / median(a))} | **${fixed(median(bHook) / median(a))}** | ${perRound.map((value) => fixed(value)).join(' ')} | ` +
      `${fixed(rate('A', (run) => run.result.p1?.points.find((p) => p.concurrency === n)?.charge.operationsPerSecond), 1)} / ${fixed(rate('B', (run) => run.result.p1?.points.find((p) => p.concurrency === n)?.charge.operationsPerSecond), 1)} / ${fixed(rate('B', (run) => webhookPoint(run, n)?.charge.operationsPerSecond), 1)} | ` +
      `${fixed(median(points.map((p) => p?.deliveries.lag.p50Ms ?? Number.NaN)), 0)} / ${fixed(median(points.map((p) => p?.deliveries.lag.p99Ms ?? Number.NaN)), 0)} | ${delivered}/${events}, ${duplicates} |`,
  );
}
if (!summaryOnly) lines.push('', `results: ${outRoot}`);
process.stdout.write(`${lines.join('\n')}\n`);
