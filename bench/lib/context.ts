import type { LedgerPool } from '../../src/ledger/pool.js';
import type { BenchStack } from './bench-stack.js';
import { withCpu, type CpuUsage } from './cpu.js';
import type { PhaseResult } from './load.js';
import type { TemporalSession } from './session.js';

/** How long and how wide the phases run; `--quick` shrinks all of them for a smoke run. */
export interface BenchSettings {
  warmupMs: number;
  durationMs: number;
  p1Concurrency: number[];
  p2Concurrency: number[];
  /** P4 runs at this concurrency, ledger-only and end to end. */
  p4Concurrency: number;
  /**
   * P4 end to end measures each side this long: at ~20 charges/s a 10-second side holds ~100 charges
   * per segment, whose counting noise alone (about ±7% on the ratio) is wider than the gap between
   * the target (0.95) and parity.
   */
  p4EndToEndDurationMs: number;
  /** P5: sequential charges on an idle system (≥ 500 for the figure). */
  idleCharges: number;
  /** P3: sequential replays for the latency figure. */
  replays: number;
  replayConcurrency: number;
  /** M1: manual-capture charges held open at once. */
  m1InFlight: number;
  /** pgbench scale factor of the TPC-B baseline (branches; accounts = 100 000 × scale). */
  tpcbScale: number;
  /** P1 concurrency used for the pragma and worker-placement variants. */
  variantConcurrency: number;
  /** Ledger-only charges made (unmeasured) before ANALYZE, so plans are those of a ledger with history. */
  historyCharges: number;
  /** Closed-loop callers of the cluster scale-out phases (1 worker process against 2). */
  scaleOutConcurrency: number;
}

export const fullSettings: BenchSettings = {
  warmupMs: 2_000,
  durationMs: 10_000,
  p1Concurrency: [1, 8, 32, 128],
  p2Concurrency: [8, 32],
  p4Concurrency: 32,
  p4EndToEndDurationMs: 60_000,
  idleCharges: 500,
  replays: 1_000,
  replayConcurrency: 32,
  m1InFlight: 1_000,
  tpcbScale: 32,
  variantConcurrency: 32,
  historyCharges: 3_000,
  scaleOutConcurrency: 32,
};

export const quickSettings: BenchSettings = {
  warmupMs: 500,
  durationMs: 2_500,
  p1Concurrency: [1, 8, 32],
  p2Concurrency: [8, 32],
  p4Concurrency: 32,
  p4EndToEndDurationMs: 2_500,
  idleCharges: 60,
  replays: 100,
  replayConcurrency: 8,
  m1InFlight: 100,
  tpcbScale: 4,
  variantConcurrency: 8,
  historyCharges: 500,
  scaleOutConcurrency: 32,
};

export interface BenchContext {
  runId: string;
  settings: BenchSettings;
  stack: BenchStack;
  /** The bench's own pool: setup and verification, never measured. */
  ledger: LedgerPool;
  log(line: string): void;
}

/** A phase's result with the CPU each component used meanwhile. */
export type PhaseFigure = PhaseResult & { cpuPercent: CpuUsage };

/** Runs a load phase and attaches the CPU readings of the servers and the worker process. */
export async function measured(
  ctx: BenchContext,
  session: TemporalSession | null,
  phase: () => Promise<PhaseResult>,
  options: { machine?: boolean } = {},
): Promise<PhaseFigure> {
  const { value, cpuPercent } = await withCpu(
    {
      temporal: ctx.stack.serverPids.temporal,
      postgres: ctx.stack.serverPids.postgres,
      worker: session?.workers.pids ?? null,
      machine: options.machine ?? false,
    },
    phase,
  );
  return { ...value, cpuPercent };
}

export function tenantFor(ctx: BenchContext, scenario: string): string {
  return `bench-${ctx.runId}-${scenario}`.toLowerCase().slice(0, 64);
}
