/**
 * One `bench/main.ts` run of a checkout, for the A/B experiments that alternate this tree with an
 * older one (p1-events-ab.ts, scenario-ab.ts): fresh servers on the dev Temporal server, no waiting
 * for a quiet machine (both sides see the same load), its stderr passed through and the results
 * file it names read back.
 */
import { spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import type { BenchResult } from '../report/result.js';

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
