/**
 * One bench scenario of this tree against the same scenario of an older checkout, runs alternated
 * A B A B so the machine's load falls on both alike: the "no regression" comparison (this tree ÷
 * before ≥ 0.97). Not part of `npm run bench`: run it with
 * `npx tsx bench/experiments/scenario-ab.ts <worktree of the older commit> <p1|p1-provider> [rounds] [phase-seconds]`
 * (3 rounds and 5-second phases by default). The older checkout needs its own `npm ci`. Each run is
 * `bench/main.ts --only <scenario> --temporal dev --phase-s <s>` on fresh servers, not waiting for a
 * quiet machine (both sides see the same load; the 1-minute load average before and after each run is
 * printed beside it). Every figure is a run's charges/s over its own baseline workflow of the same run
 * (docs/bench.md); the summary gives, per N, each side's median and their ratio, and each round's.
 */
import { join, resolve } from 'node:path';
import type { BenchResult } from '../report/result.js';
import { benchRun, fixed, load, median, type Run } from './bench-run.js';

const scenarios = { p1: 'p1', 'p1-provider': 'p1Provider' } as const;
type Scenario = keyof typeof scenarios;

const [beforeTree, scenarioArg] = process.argv.slice(2);
if (!beforeTree || !(scenarioArg! in scenarios)) {
  throw new Error(`usage: scenario-ab.ts <worktree of the older commit> <${Object.keys(scenarios).join('|')}> [rounds] [phase-seconds]`);
}
const scenario = scenarioArg as Scenario;
const rounds = Number(process.argv[4] ?? 3);
const phaseSeconds = Number(process.argv[5] ?? 5);
if (!Number.isInteger(rounds) || rounds < 1 || rounds > 20) throw new Error('rounds: an integer from 1 to 20');
if (!Number.isInteger(phaseSeconds) || phaseSeconds < 1 || phaseSeconds > 120) throw new Error('phase-seconds: an integer from 1 to 120');
const outRoot = resolve('.data/scenario-ab', `${scenario}-${new Date().toISOString().replace(/[-:]/g, '').slice(0, 13)}`);

interface Point {
  concurrency: number;
  ratio: number | null;
  charge: { operationsPerSecond: number };
}

const pointsOf = (run: Run): Point[] => ((run.result as unknown as Record<string, { points: Point[] } | undefined>)[scenarios[scenario]]?.points ?? []);
const pointAt = (run: Run, n: number): Point | undefined => pointsOf(run).find((p) => p.concurrency === n);

const runs: Run[] = [];
for (let round = 1; round <= rounds; round += 1) {
  for (const side of ['A', 'B'] as const) {
    const loadBefore = load();
    const result = side === 'A'
      ? await benchRun(resolve(beforeTree), { only: scenario, phaseSeconds, outDir: join(outRoot, 'before'), label: `scenario-ab ${scenario} round ${round}: before` })
      : await benchRun(process.cwd(), { only: scenario, phaseSeconds, outDir: join(outRoot, 'this'), label: `scenario-ab ${scenario} round ${round}: this tree` });
    const run = { side, loadBefore, loadAfter: load(), result };
    runs.push(run);
    process.stderr.write(`round ${round} ${side}: commit ${result.versions.gitCommit}, load ${run.loadBefore} -> ${run.loadAfter}, correct ${result.correct}\n`);
  }
}

const sideRuns = (side: 'A' | 'B') => runs.filter((r) => r.side === side);
const concurrencies = pointsOf(runs[0]!).map((p) => p.concurrency);
const lines: string[] = [];
lines.push(`# ${scenario}: before (A: ${sideRuns('A')[0]!.result.versions.gitCommit}) and this tree (B: ${sideRuns('B')[0]!.result.versions.gitCommit}), ${rounds} rounds A B, ${phaseSeconds} s phases`);
lines.push('', '| round | side | 1-min load before / after | correct | charges ÷ baseline per N |', '|---:|---|---|---|---|');
runs.forEach((run, index) => {
  lines.push(`| ${Math.floor(index / 2) + 1} | ${run.side} | ${run.loadBefore.split(' ')[0]} / ${run.loadAfter.split(' ')[0]} | ${run.result.correct} | ${concurrencies.map((n) => fixed(pointAt(run, n)?.ratio ?? Number.NaN)).join(' / ')} |`);
});
lines.push('', '| N | A ÷ baseline (median) | B ÷ baseline (median) | **B ÷ A** | per round B ÷ A | charges/s A / B (medians) |', '|---:|---:|---:|---:|---|---|');
for (const n of concurrencies) {
  const a = sideRuns('A').map((run) => pointAt(run, n)?.ratio ?? Number.NaN);
  const b = sideRuns('B').map((run) => pointAt(run, n)?.ratio ?? Number.NaN);
  const rate = (side: 'A' | 'B') => median(sideRuns(side).map((run) => pointAt(run, n)?.charge.operationsPerSecond ?? Number.NaN));
  lines.push(`| ${n} | ${fixed(median(a))} | ${fixed(median(b))} | **${fixed(median(b) / median(a))}** | ${b.map((value, i) => fixed(value / a[i]!)).join(' ')} | ${fixed(rate('A'), 1)} / ${fixed(rate('B'), 1)} |`);
}
lines.push('', `results: ${outRoot}`);
process.stdout.write(`${lines.join('\n')}\n`);
