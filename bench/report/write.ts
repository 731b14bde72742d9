import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readFileIfPresent } from '../../src/support/files.js';
import { figuresTable, renderMarkdown, scaleOutSection, serversTable, setupLines } from './markdown.js';
import type { BenchResult } from './result.js';
import { renderSvg } from './svg.js';

export interface WrittenReport {
  jsonPath: string;
  markdownPath: string;
  svgPath: string;
}

/**
 * bench/results/<date>-<run id>.json (+ .md and .svg): the run id (its start to the minute) keeps a
 * second run on the same day from replacing the first. Results of earlier runs keep their names.
 */
export function reportBaseName(result: BenchResult): string {
  return `${result.startedAt.slice(0, 10)}-${result.runId}${result.quick ? '-quick' : ''}`;
}

export async function writeReport(result: BenchResult, outDir: string): Promise<WrittenReport> {
  await mkdir(outDir, { recursive: true });
  const base = reportBaseName(result);
  const jsonPath = join(outDir, `${base}.json`);
  const markdownPath = join(outDir, `${base}.md`);
  const svgPath = join(outDir, `${base}.svg`);
  await writeFile(jsonPath, `${JSON.stringify(result, null, 2)}\n`);
  await writeFile(svgPath, renderSvg(result));
  await writeFile(markdownPath, renderMarkdown(result, `${base}.svg`));
  return { jsonPath, markdownPath, svgPath };
}

const startMarker = '<!-- bench:latest:start -->';
const endMarker = '<!-- bench:latest:end -->';

/**
 * Why this run's figures may not stand in the docs, or null if they may: figures published beside
 * the code must be reproducible from a commit, and a dirty tree (or an unknown one) is not one.
 * The results files still record such a run, commit marked as `git describe --dirty` gave it.
 */
export function docsRefusal(result: BenchResult): string | null {
  const commit = result.versions.gitCommit;
  if (commit === null) return 'the commit of the measured code is unknown';
  if (commit.endsWith('-dirty')) return `the working tree was dirty (${commit})`;
  return null;
}

/**
 * Replaces the marked "latest results" block of a Markdown page (docs/bench.md, README.md) with this
 * run's setup and table, so both always show the last full run. Nothing happens without the markers.
 */
export async function updateDocs(result: BenchResult, docsPath: string, resultsLinkDir: string): Promise<boolean> {
  const refusal = docsRefusal(result);
  if (refusal !== null) throw new Error(`not publishing bench figures in ${docsPath}: ${refusal}`);
  const text = await readFileIfPresent(docsPath);
  if (text === null) return false;
  const start = text.indexOf(startMarker);
  const end = text.indexOf(endMarker);
  if (start < 0 || end < start) return false;
  const base = reportBaseName(result);
  const block = [
    startMarker,
    '',
    setupLines(result),
    '',
    figuresTable(result),
    '',
    ...[serversTable(result), scaleOutSection(result)].filter(Boolean).flatMap((section) => [section, '']),
    `![latency percentiles and throughput](${resultsLinkDir}/${base}.svg)`,
    '',
    `Full report: [${base}.md](${resultsLinkDir}/${base}.md), raw figures: [${base}.json](${resultsLinkDir}/${base}.json).`,
    '',
    endMarker,
  ].join('\n');
  await writeFile(docsPath, text.slice(0, start) + block + text.slice(end + endMarker.length));
  return true;
}
