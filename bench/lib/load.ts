import { setTimeout as delay } from 'node:timers/promises';
import { Progress } from '../../src/support/progress.js';
import { summariseLatencies, type LatencySummaryMs } from './stats.js';

/**
 * One operation of a load phase; `sequence` is unique within the phase (keys are built from it).
 * The loops also pass the performance.now() time its latency is measured from: an open loop's
 * scheduled arrival, a closed loop's start.
 */
export type Operation = (sequence: number, scheduledAtMs?: number) => Promise<void>;

export interface PhaseResult {
  label: string;
  /** Callers for a closed loop; the cap on operations in flight for an open loop. */
  concurrency: number;
  completed: number;
  failed: number;
  /** The measured window: warm-up excluded. */
  windowMs: number;
  operationsPerSecond: number;
  latency: LatencySummaryMs;
  /** The first few failure messages, for the report. */
  failureSamples: string[];
  /** Open loop only: arrivals dropped because maxInFlight operations were already running. */
  shed?: number;
  /** Open loop only: the arrival rate asked for. */
  offeredPerSecond?: number;
}

export interface ClosedLoopOptions {
  label: string;
  concurrency: number;
  /** Operations that start before warm-up ends are run but not counted (caches, JIT, pool). */
  warmupMs: number;
  durationMs: number;
  /** Hard cap on operations started, warm-up included. */
  maxOperations: number;
  operation: Operation;
  /** When given, every measured latency is appended here (interleaved phases merge their segments). */
  latencySinkMs?: number[];
}

export const failureSampleLimit = 5;

class PhaseRecorder {
  readonly latenciesMs: number[] = [];
  failed = 0;
  readonly failureSamples: string[] = [];
  lastCompletionAtMs = 0;

  constructor(private readonly windowStartMs: number) {}

  async time(operation: Operation, sequence: number, startedAtMs: number): Promise<void> {
    try {
      await operation(sequence, startedAtMs);
      const endedAtMs = performance.now();
      if (startedAtMs >= this.windowStartMs) {
        this.latenciesMs.push(endedAtMs - startedAtMs);
        this.lastCompletionAtMs = endedAtMs;
      }
    } catch (error) {
      if (startedAtMs >= this.windowStartMs) this.failed++;
      if (this.failureSamples.length < failureSampleLimit) {
        this.failureSamples.push((error as Error)?.message ?? String(error));
      }
    }
  }
}

/**
 * N callers, each starting its next operation as soon as the previous one answered: throughput is
 * what the system sustains at that concurrency, latency is what each caller saw. Bounded by time
 * and by count; in-flight operations are awaited at the end (each has its own deadline).
 */
export async function runClosedLoop(options: ClosedLoopOptions): Promise<PhaseResult> {
  const startMs = performance.now();
  const windowStartMs = startMs + options.warmupMs;
  const endMs = windowStartMs + options.durationMs;
  const recorder = new PhaseRecorder(windowStartMs);
  const progress = new Progress(options.label, Math.round((options.warmupMs + options.durationMs) / 1000));
  let started = 0;

  const caller = async (): Promise<void> => {
    while (performance.now() < endMs && started < options.maxOperations) {
      const sequence = started++;
      await recorder.time(options.operation, sequence, performance.now());
    }
  };
  const ticker = setInterval(() => {
    const elapsedS = Math.round((performance.now() - startMs) / 1000);
    progress.update(Math.min(elapsedS, Math.round((endMs - startMs) / 1000)), `${recorder.latenciesMs.length} done`);
  }, 500);
  try {
    await Promise.all(Array.from({ length: options.concurrency }, caller));
  } finally {
    clearInterval(ticker);
  }
  // A phase cut short by maxOperations is measured up to its last completion, not its planned end.
  const windowEndMs = started >= options.maxOperations ? Math.max(recorder.lastCompletionAtMs, windowStartMs) : endMs;
  const result = finish(options.label, options.concurrency, recorder, windowEndMs - windowStartMs);
  if (options.latencySinkMs) for (const latencyMs of recorder.latenciesMs) options.latencySinkMs.push(latencyMs);
  progress.finish(`${result.completed} ops, ${result.operationsPerSecond.toFixed(0)}/s, p50 ${result.latency.p50Ms.toFixed(1)} ms`);
  return result;
}

export interface OpenLoopOptions {
  label: string;
  /** Mean arrival rate; arrivals are Poisson (exponential gaps) from a fixed seed. */
  ratePerSecond: number;
  warmupMs: number;
  durationMs: number;
  /** Arrivals beyond this many operations in flight are shed (and counted) rather than queued forever. */
  maxInFlight: number;
  operation: Operation;
  seed?: number;
}

/**
 * Operations arrive on their own schedule, whether or not earlier ones answered: latency is
 * measured from the scheduled arrival, so a stall shows up in the percentiles instead of quietly
 * slowing the arrivals down (coordinated omission).
 */
export async function runOpenLoop(options: OpenLoopOptions): Promise<PhaseResult> {
  const startMs = performance.now();
  const windowStartMs = startMs + options.warmupMs;
  const endMs = windowStartMs + options.durationMs;
  const recorder = new PhaseRecorder(windowStartMs);
  const random = seededRandom(options.seed ?? 0x5eed);
  const maxArrivals = Math.ceil((options.ratePerSecond * (options.warmupMs + options.durationMs)) / 1000) * 2 + 100;
  const inFlight = new Set<Promise<void>>();
  const progress = new Progress(options.label, Math.round((options.warmupMs + options.durationMs) / 1000));
  let shed = 0;
  let nextArrivalMs = startMs;

  for (let sequence = 0; sequence < maxArrivals; sequence++) {
    nextArrivalMs += (-Math.log(1 - random()) * 1000) / options.ratePerSecond;
    if (nextArrivalMs >= endMs) break;
    const waitMs = nextArrivalMs - performance.now();
    if (waitMs > 1) await delay(waitMs);
    if (inFlight.size >= options.maxInFlight) {
      if (nextArrivalMs >= windowStartMs) shed++;
      continue;
    }
    const running = recorder.time(options.operation, sequence, nextArrivalMs).finally(() => inFlight.delete(running));
    inFlight.add(running);
    if (sequence % 50 === 0) {
      progress.update(Math.round((performance.now() - startMs) / 1000), `${recorder.latenciesMs.length} done, ${inFlight.size} in flight`);
    }
  }
  await Promise.all(inFlight);
  const result = finish(options.label, options.maxInFlight, recorder, endMs - windowStartMs);
  result.shed = shed;
  result.offeredPerSecond = options.ratePerSecond;
  progress.finish(`${result.completed} ops at ${options.ratePerSecond.toFixed(0)}/s offered, p99 ${result.latency.p99Ms.toFixed(1)} ms`);
  return result;
}

function finish(label: string, concurrency: number, recorder: PhaseRecorder, windowMs: number): PhaseResult {
  const latency = summariseLatencies(recorder.latenciesMs);
  return {
    label,
    concurrency,
    completed: latency.count,
    failed: recorder.failed,
    windowMs,
    operationsPerSecond: windowMs > 0 ? (latency.count * 1000) / windowMs : Number.NaN,
    latency,
    failureSamples: recorder.failureSamples,
  };
}

/** mulberry32: tiny, seedable, good enough to space arrivals reproducibly. */
function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Runs `count` operations with `concurrency` callers, unmeasured: setup and seeding. */
export async function runBounded(count: number, concurrency: number, operation: Operation): Promise<void> {
  let next = 0;
  const caller = async (): Promise<void> => {
    while (next < count) await operation(next++);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, caller));
}
