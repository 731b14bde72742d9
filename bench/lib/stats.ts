/** Latency figures of one measured phase, every one in milliseconds. */
export interface LatencySummaryMs {
  count: number;
  meanMs: number;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  maxMs: number;
}

/**
 * Nearest-rank percentile of an ascending array (the value below which `fraction` of the samples
 * lie); no interpolation, so every reported figure is a latency that actually happened.
 */
export function percentileOfSorted(sortedMs: readonly number[], fraction: number): number {
  if (sortedMs.length === 0) return Number.NaN;
  const rank = Math.ceil(fraction * sortedMs.length);
  return sortedMs[Math.min(sortedMs.length, Math.max(1, rank)) - 1]!;
}

export function summariseLatencies(samplesMs: readonly number[]): LatencySummaryMs {
  const sorted = Float64Array.from(samplesMs).sort();
  const list = Array.from(sorted);
  const total = list.reduce((sum, value) => sum + value, 0);
  return {
    count: list.length,
    meanMs: list.length === 0 ? Number.NaN : total / list.length,
    p50Ms: percentileOfSorted(list, 0.5),
    p90Ms: percentileOfSorted(list, 0.9),
    p99Ms: percentileOfSorted(list, 0.99),
    maxMs: list.length === 0 ? Number.NaN : list[list.length - 1]!,
  };
}

/** measured / baseline, or NaN when the baseline is missing or zero (printed as "n/a"). */
export function ratio(measured: number, baseline: number): number {
  if (!Number.isFinite(measured) || !Number.isFinite(baseline) || baseline === 0) return Number.NaN;
  return measured / baseline;
}

/** Rounds for reports: figures keep 3 significant digits, which is more than their noise. */
export function round(value: number, digits = 3): number {
  if (!Number.isFinite(value) || value === 0) return value;
  const magnitude = Math.floor(Math.log10(Math.abs(value)));
  const factor = 10 ** Math.max(0, digits - 1 - magnitude);
  return Math.round(value * factor) / factor;
}
