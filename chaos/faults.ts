/**
 * The faults of a chaos run, on a fixed timeline: a worker process SIGKILLed every few seconds
 * (and started again at once, as a supervisor would), PostgreSQL restarted (alternately a fast
 * shutdown and an immediate one, i.e. a crash), and Temporal restarted. One fault at a time, so
 * each has a measurable recovery.
 */
import type { ChaosPostgres, ChaosTemporal } from './infrastructure.js';
import type { AppProcess } from './processes.js';

export type FaultKind = 'worker SIGKILL' | 'PostgreSQL fast restart' | 'PostgreSQL immediate restart' | 'Temporal restart';

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
}

interface Planned {
  atMs: number;
  kind: FaultKind;
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
  temporal: ChaosTemporal;
  workers: readonly AppProcess[];
}

async function inject(kind: FaultKind, targets: FaultTargets, restarts: Promise<void>[]): Promise<void> {
  switch (kind) {
    case 'worker SIGKILL': {
      // Only a worker that is serving: killing one that is still starting would test nothing more.
      const serving = targets.workers.filter((worker) => worker.ready);
      const victim = serving[Math.floor(Math.random() * serving.length)];
      if (victim === undefined) return;
      await victim.kill();
      // Started again in the background, as a supervisor would: the timeline goes on meanwhile.
      const restart = victim.start();
      // Awaited at the end of the run; a rejection must not go unhandled meanwhile.
      restart.catch(() => undefined);
      restarts.push(restart);
      return;
    }
    case 'PostgreSQL fast restart':
      return targets.postgres.restart('fast');
    case 'PostgreSQL immediate restart':
      return targets.postgres.restart('immediate');
    case 'Temporal restart':
      return targets.temporal.restart();
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
    const fault: InjectedFault = { kind: planned.kind, startedAtMs: Date.now(), endedAtMs: 0, recoveryMs: null };
    try {
      await inject(planned.kind, targets, restarts);
    } catch (error) {
      fault.error = (error as Error).message;
    }
    fault.endedAtMs = Date.now();
    injected.push(fault);
    options.log(`${planned.kind} at +${Math.round((fault.startedAtMs - options.startedAtMs) / 1000)} s, back after ${fault.endedAtMs - fault.startedAtMs} ms${fault.error ? ` (FAILED: ${fault.error})` : ''}`);
  }
  const restarted = await Promise.allSettled(restarts);
  for (const failed of restarted.filter((r): r is PromiseRejectedResult => r.status === 'rejected')) {
    injected.push({ kind: 'worker SIGKILL', startedAtMs: Date.now(), endedAtMs: Date.now(), recoveryMs: null, error: `restart failed: ${(failed.reason as Error).message}` });
  }
  return injected;
}

/** Each fault's recovery: from its start to the first charge decided once the part was back. */
export function measureRecoveries(faults: InjectedFault[], decidedAtMs: readonly number[]): void {
  const sorted = [...decidedAtMs].sort((a, b) => a - b);
  for (const fault of faults) {
    const first = sorted.find((atMs) => atMs >= fault.endedAtMs);
    fault.recoveryMs = first === undefined ? null : first - fault.startedAtMs;
  }
}
