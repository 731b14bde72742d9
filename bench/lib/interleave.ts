import type { PhaseFigure } from './context.js';
import { failureSampleLimit } from './load.js';
import { summariseLatencies } from './stats.js';

/** One segment of an interleaved phase; it appends its measured latencies to `latencySinkMs`. */
export type Segment = (segment: { index: number; durationMs: number; latencySinkMs: number[] }) => Promise<PhaseFigure>;

export interface InterleavedPair {
  a: PhaseFigure;
  b: PhaseFigure;
}

/**
 * Measures two phases that are reported as a ratio in the order A B B A, each segment half the
 * phase's measured time (each with its own warm-up). On the dev server every phase runs slower than
 * the one before it (its SQLite file and PostgreSQL's tables grow, checkpoints land where they
 * land), so A-then-B charges that drift to B; ABBA cancels a linear drift exactly and a single run
 * of each side cannot.
 */
export async function runInterleaved(durationMs: number, a: Segment, b: Segment): Promise<InterleavedPair> {
  const segmentMs = Math.max(1, Math.round(durationMs / 2));
  const samples = { a: [] as number[], b: [] as number[] };
  const parts = { a: [] as PhaseFigure[], b: [] as PhaseFigure[] };
  const order = ['a', 'b', 'b', 'a'] as const;
  for (const [position, side] of order.entries()) {
    const run = side === 'a' ? a : b;
    const index = position < 2 ? 0 : 1;
    parts[side].push(await run({ index, durationMs: segmentMs, latencySinkMs: samples[side] }));
  }
  return { a: mergeSegments(parts.a, samples.a), b: mergeSegments(parts.b, samples.b) };
}

/** The segments of one side as one phase: counts add up, percentiles come from every sample. */
export function mergeSegments(parts: readonly PhaseFigure[], samplesMs: readonly number[]): PhaseFigure {
  const first = parts[0];
  if (!first) throw new Error('mergeSegments needs at least one segment');
  const windowMs = parts.reduce((sum, part) => sum + part.windowMs, 0);
  const completed = parts.reduce((sum, part) => sum + part.completed, 0);
  if (completed !== samplesMs.length) {
    throw new Error(`segments of ${first.label} completed ${completed} operations but recorded ${samplesMs.length} latencies`);
  }
  const cpuPercent: Record<string, number> = {};
  for (const name of new Set(parts.flatMap((part) => Object.keys(part.cpuPercent)))) {
    const weighted = parts.reduce((sum, part) => sum + (part.cpuPercent[name] ?? 0) * part.windowMs, 0);
    cpuPercent[name] = Math.round(weighted / windowMs);
  }
  return {
    label: first.label,
    concurrency: first.concurrency,
    completed,
    failed: parts.reduce((sum, part) => sum + part.failed, 0),
    windowMs,
    operationsPerSecond: windowMs > 0 ? (completed * 1000) / windowMs : Number.NaN,
    latency: summariseLatencies(samplesMs),
    failureSamples: parts.flatMap((part) => part.failureSamples).slice(0, failureSampleLimit),
    cpuPercent,
  };
}
