/**
 * One `bench/main.ts` run of a checkout, for the A/B experiments that alternate this tree with an
 * older one (p1-events-ab.ts, scenario-ab.ts): fresh servers on the dev Temporal server, no waiting
 * for a quiet machine (both sides see the same load), its stderr passed through and the results
 * file it names read back.
 */
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { loadavg } from 'node:os';
import type { BenchResult } from '../report/result.js';

/** One side's run of a round: A the older checkout, B this tree, with the 1-minute loads around it. */
export interface Run {
  side: 'A' | 'B';
  loadBefore: string;
  loadAfter: string;
  result: BenchResult;
}

/** The machine's load averages (1, 5, 15 min), printed beside every run. */
export const load = (): string => loadavg().map((value) => value.toFixed(2)).join(' ');

export const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};

/** A figure with `digits` decimals, or n/a when a run did not give it. */
export const fixed = (value: number | undefined, digits = 2): string => (value === undefined || !Number.isFinite(value) ? 'n/a' : value.toFixed(digits));

export function benchRun(cwd: string, run: { only: string; phaseSeconds: number; outDir: string; label: string }): Promise<BenchResult> {
  const args = ['tsx', 'bench/main.ts', '--only', run.only, '--temporal', 'dev', '--phase-s', String(run.phaseSeconds), '--max-load', '1000', '--load-wait-s', '1', '--no-docs', '--out', run.outDir, '--label', run.label];
  process.stderr.write(`\n$ (cd ${cwd} && npx ${args.join(' ')})\n`);
  return new Promise((resolvePromise, reject) => {
    const child = spawn('npx', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
    let jsonPath: string | null = null;
    child.stderr.on('data', (chunk: Buffer) => {
      const text = chunk.toString();
      process.stderr.write(text);
      jsonPath = /results: (\S+\.json)/.exec(text)?.[1] ?? jsonPath;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      if (jsonPath === null) {
        reject(new Error(`bench run in ${cwd} exited ${code} without results`));
        return;
      }
      readFile(jsonPath, 'utf8').then((text) => resolvePromise(JSON.parse(text) as BenchResult), reject);
    });
  });
}
