/**
 * The faults of a chaos run, on a fixed timeline: a worker process SIGKILLed every few seconds
 * (its supervisor starts it again), PostgreSQL restarted (alternately a fast shutdown and an
 * immediate one, i.e. a crash), and Temporal restarted. In the storm at most one at a time; in the
 * single-fault mode one at a time with quiet between, so each recovery is the fault's own.
 */
import { loadavg } from 'node:os';
import { pollUntil } from '../src/support/wait.js';
import type { ChaosPostgres, ChaosTemporal } from './infrastructure.js';
import { killNow, type AppProcess } from './processes.js';
import type { SlowestKey } from './slowest-key.js';

export type FaultKind =
  | 'worker SIGKILL'
  | 'both workers SIGKILL'
  | 'PostgreSQL fast restart'
  | 'PostgreSQL immediate restart'
  /** Only with Temporal on a PostgreSQL of its own (`--temporal-postgres separate`): that one crashes. */
  | "Temporal's PostgreSQL immediate restart"
  | 'Temporal restart';

/** The single-fault mode's faults, in the order each round injects them. */
export const singleFaultKinds: readonly FaultKind[] = ['worker SIGKILL', 'both workers SIGKILL', 'PostgreSQL immediate restart', 'Temporal restart'];

/** The short names `--single-kinds` takes, one per kind of {@link singleFaultKinds}. */
export const singleFaultKindsByName: Readonly<Record<string, FaultKind>> = {
  worker: 'worker SIGKILL',
  workers: 'both workers SIGKILL',
  postgres: 'PostgreSQL immediate restart',
  temporal: 'Temporal restart',
  'temporal-postgres': "Temporal's PostgreSQL immediate restart",
};
export const singleFaultKindNames = Object.keys(singleFaultKindsByName);

/** How long a killed worker's supervisor may take to have it serving again before the fault counts as failed. */
const workerBackTimeoutMs = 120_000;

export interface FaultSchedule {
  workerKillEveryMs: number;
  postgresRestartEveryMs: number;
  temporalRestartEveryMs: number;
}

export interface InjectedFault {
  kind: FaultKind;
  startedAtMs: number;
  /** When the restarted part was back (the killed worker ready again, the server accepting connections). */
  endedAtMs: number;
  /** Filled in at the end: from the fault to the first charge decided after the part came back. */
  recoveryMs: number | null;
  /** A fault that could not be injected (e.g. a server that would not start again): the run fails. */
  error?: string;
  /** 1-minute load average when it was injected: the machine is shared, so figures need it. */
  loadAverage?: number;
}

interface Planned {
  atMs: number;
  kind: FaultKind;
}

/**
 * The single-fault timeline: each of `kinds` (default {@link singleFaultKinds}) in turn, `gapMs` apart (the
 * first after one gap of steady load), for as long as the run lasts.
 */
export function planSingleFaults(gapMs: number, durationMs: number, kinds: readonly FaultKind[] = singleFaultKinds): Planned[] {
  if (kinds.length === 0) throw new Error('single-fault mode needs at least one kind of fault');
  const planned: Planned[] = [];
  for (let i = 0, atMs = gapMs; atMs < durationMs; i++, atMs += gapMs) planned.push({ atMs, kind: kinds[i % kinds.length]! });
  return planned;
}

/** The timeline from the start of the storm: at most one fault at any moment, in time order. */
export function planFaults(schedule: FaultSchedule, durationMs: number): Planned[] {
  const planned: Planned[] = [];
  for (let atMs = schedule.workerKillEveryMs; atMs < durationMs; atMs += schedule.workerKillEveryMs) {
    planned.push({ atMs, kind: 'worker SIGKILL' });
  }
  let fast = true;
  for (let atMs = schedule.postgresRestartEveryMs / 2; atMs < durationMs; atMs += schedule.postgresRestartEveryMs) {
    planned.push({ atMs, kind: fast ? 'PostgreSQL fast restart' : 'PostgreSQL immediate restart' });
    fast = !fast;
  }
  for (let atMs = schedule.temporalRestartEveryMs * 0.75; atMs < durationMs; atMs += schedule.temporalRestartEveryMs) {
    planned.push({ atMs, kind: 'Temporal restart' });
  }
  return planned.sort((a, b) => a.atMs - b.atMs);
}

export interface FaultTargets {
  postgres: ChaosPostgres;
  /** Temporal's own PostgreSQL, when it is not the ledger's. */
  temporalPostgres: ChaosPostgres | null;
  temporal: ChaosTemporal;
  workers: readonly AppProcess[];
}

/** SIGKILLs the workers and resolves once their supervisors have each serving again. */
async function killWorkers(victims: readonly AppProcess[]): Promise<void> {
  const before = victims.map((victim) => victim.current?.pid);
  for (const victim of victims) killNow(victim);
  const back = await pollUntil(async () => victims.every((victim, i) => victim.current !== null && victim.current.pid !== before[i]), {
    deadlineMs: Date.now() + workerBackTimeoutMs,
    intervalMs: 20,
  });
  if (!back.ok) throw new Error(`${victims.map((v) => v.name).join(', ')} not serving again within ${workerBackTimeoutMs} ms`);
}

async function inject(kind: FaultKind, targets: FaultTargets, restarts: Promise<void>[]): Promise<void> {
  switch (kind) {
    case 'worker SIGKILL': {
      // Only a worker that is serving: killing one that is still starting would test nothing more.
      const serving = targets.workers.filter((worker) => worker.current !== null);
      const victim = serving[Math.floor(Math.random() * serving.length)];
      if (victim === undefined) return;
      // Its supervisor starts it again; the timeline goes on meanwhile, and the run waits for it at the end.
      const restart = killWorkers([victim]);
      restart.catch(() => undefined);
      restarts.push(restart);
      return;
    }
    case 'both workers SIGKILL':
      return killWorkers(targets.workers);
    case 'PostgreSQL fast restart':
      return targets.postgres.restart('fast');
    case 'PostgreSQL immediate restart':
      return targets.postgres.restart('immediate');
    case 'Temporal restart':
      return targets.temporal.restart();
    case "Temporal's PostgreSQL immediate restart":
      if (targets.temporalPostgres === null) throw new Error("Temporal has no PostgreSQL of its own in this run (--temporal-postgres separate)");
      return targets.temporalPostgres.restart('immediate');
  }
}

/** Injects the planned faults from `startedAtMs` until the plan (or `stop`) ends. */
export async function runFaults(
  plan: readonly Planned[],
  targets: FaultTargets,
  options: { startedAtMs: number; durationMs: number; log: (line: string) => void },
): Promise<InjectedFault[]> {
  const injected: InjectedFault[] = [];
  const restarts: Promise<void>[] = [];
  for (const planned of plan) {
    // A fault that took long (a slow restart) delays the rest; none is injected after the storm.
    if (Date.now() >= options.startedAtMs + options.durationMs) break;
    const waitMs = options.startedAtMs + planned.atMs - Date.now();
    if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
    const fault: InjectedFault = { kind: planned.kind, startedAtMs: Date.now(), endedAtMs: 0, recoveryMs: null, loadAverage: loadavg()[0] };
    try {
      await inject(planned.kind, targets, restarts);
    } catch (error) {
      fault.error = (error as Error).message;
    }
    fault.endedAtMs = Date.now();
    injected.push(fault);
    options.log(`${planned.kind} at +${Math.round((fault.startedAtMs - options.startedAtMs) / 1000)} s, back after ${fault.endedAtMs - fault.startedAtMs} ms${fault.error ? ` (FAILED: ${fault.error})` : ''}`);
  }
  // A worker still on its way back at the end of the plan is waited for, so settling has every worker.
  const restarted = await Promise.allSettled(restarts);
  for (const failed of restarted.filter((r): r is PromiseRejectedResult => r.status === 'rejected')) {
    injected.push({ kind: 'worker SIGKILL', startedAtMs: Date.now(), endedAtMs: Date.now(), recoveryMs: null, error: `restart failed: ${(failed.reason as Error).message}` });
  }
  return injected;
}

export interface SingleFaultRecovery {
  kind: FaultKind;
  /** Keys sent before the fault and not decided when it struck. */
  keysInFlight: number;
  /** From the fault to the decision of each of those keys (null: none, or one never decided). */
  p50Ms: number | null;
  p99Ms: number | null;
  maxMs: number | null;
  undecided: number;
  /** From the fault to the first decision of any key after it. */
  firstDecisionMs: number | null;
  /** 1-minute load average of the machine when the fault struck. */
  loadAverage: number;
  /** The slowest of the keys in flight and what its workflow history shows (filled after the run). */
  slowestKey?: SlowestKey | null;
}

function percentile(sorted: readonly number[], fraction: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil(fraction * sorted.length) - 1)]!;
}

/** Per fault: the keys it caught in flight, and how long each took to be decided after it. */
export function singleFaultRecoveries(
  faults: readonly InjectedFault[],
  keys: ReadonlyArray<{ firstSentAtMs: number; decidedAtMs: number | null }>,
  decidedAtMs: readonly number[],
): SingleFaultRecovery[] {
  const decisions = [...decidedAtMs].sort((a, b) => a - b);
  return faults.map((fault) => {
    const caught = keys.filter((key) => key.firstSentAtMs < fault.startedAtMs && (key.decidedAtMs === null || key.decidedAtMs >= fault.startedAtMs));
    const times = caught.flatMap((key) => (key.decidedAtMs === null ? [] : [key.decidedAtMs - fault.startedAtMs])).sort((a, b) => a - b);
    const first = decisions.find((atMs) => atMs >= fault.startedAtMs);
    return {
      kind: fault.kind,
      keysInFlight: caught.length,
      p50Ms: percentile(times, 0.5),
      p99Ms: percentile(times, 0.99),
      maxMs: times.at(-1) ?? null,
      undecided: caught.length - times.length,
      firstDecisionMs: first === undefined ? null : first - fault.startedAtMs,
      loadAverage: fault.loadAverage ?? 0,
    };
  });
}

/** Each fault's recovery: from its start to the first charge decided once the part was back. */
export function measureRecoveries(faults: InjectedFault[], decidedAtMs: readonly number[]): void {
  const sorted = [...decidedAtMs].sort((a, b) => a - b);
  for (const fault of faults) {
    const first = sorted.find((atMs) => atMs >= fault.endedAtMs);
    fault.recoveryMs = first === undefined ? null : first - fault.startedAtMs;
  }
}
