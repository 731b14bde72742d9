import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { figuresTable, renderMarkdown, setupLines } from './markdown.js';
import type { BenchResult } from './result.js';
import { renderSvg } from './svg.js';

export interface WrittenReport {
  jsonPath: string;
  markdownPath: string;
  svgPath: string;
}

/** bench/results/<date>.json (+ .md and .svg); a second run on the same day replaces the first. */
export async function writeReport(result: BenchResult, outDir: string): Promise<WrittenReport> {
  await mkdir(outDir, { recursive: true });
  const base = `${result.startedAt.slice(0, 10)}${result.quick ? '-quick' : ''}`;
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
 * Replaces the marked "latest results" block of a Markdown page (docs/bench.md, README.md) with this
 * run's setup and table, so both always show the last full run. Nothing happens without the markers.
 */
export async function updateDocs(result: BenchResult, docsPath: string, resultsLinkDir: string): Promise<boolean> {
  const text = await readFile(docsPath, 'utf8').catch(() => null);
  if (text === null) return false;
  const start = text.indexOf(startMarker);
  const end = text.indexOf(endMarker);
  if (start < 0 || end < start) return false;
  const base = result.startedAt.slice(0, 10);
  const block = [
    startMarker,
    '',
    setupLines(result),
    '',
    figuresTable(result),
    '',
    `![latency percentiles and throughput](${resultsLinkDir}/${base}.svg)`,
    '',
    `Full report: [${base}.md](${resultsLinkDir}/${base}.md), raw figures: [${base}.json](${resultsLinkDir}/${base}.json).`,
    '',
    endMarker,
  ].join('\n');
  await writeFile(docsPath, text.slice(0, start) + block + text.slice(end + endMarker.length));
  return true;
}
