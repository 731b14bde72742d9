import { readdir } from 'node:fs/promises';
import { readFileIfPresent } from '../../src/support/files.js';

/** Which processes to charge CPU time to; a postgres entry also counts its backends. */
export interface CpuSubjects {
  temporal: number | null;
  postgres: number | null;
  /** Worker process (when the worker runs apart from the load generator). */
  worker: number | null;
}

export type CpuSnapshot = { atMs: number; secondsBy: Record<string, number> };

/** Percent of one core each component used over a phase: which resource saturates is the question. */
export type CpuUsage = Record<string, number>;

const ticksPerSecond = 100; // USER_HZ on Linux

interface ProcStat {
  pid: number;
  ppid: number;
  /** utime + stime (+ cutime + cstime of reaped children when asked), in seconds. */
  seconds: number;
  childSeconds: number;
}

async function readStat(pid: number): Promise<ProcStat | null> {
  const text = await readFileIfPresent(`/proc/${pid}/stat`);
  if (text === null) return null;
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const n = (i: number): number => Number(fields[i] ?? 0);
  // Fields after the command: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14)
  return { pid, ppid: n(1), seconds: (n(11) + n(12)) / ticksPerSecond, childSeconds: (n(13) + n(14)) / ticksPerSecond };
}

async function processTreeSeconds(rootPid: number): Promise<number> {
  const root = await readStat(rootPid);
  if (root === null) return Number.NaN;
  let total = root.seconds + root.childSeconds; // backends that exited were reaped by the postmaster
  const pids = (await readdir('/proc')).filter((name) => /^\d+$/.test(name)).map(Number);
  const stats = await Promise.all(pids.map(readStat));
  for (const stat of stats) if (stat !== null && stat.ppid === rootPid) total += stat.seconds;
  return total;
}

export async function takeCpuSnapshot(subjects: CpuSubjects): Promise<CpuSnapshot> {
  const usage = process.cpuUsage();
  const secondsBy: Record<string, number> = { bench: (usage.user + usage.system) / 1e6 };
  if (subjects.temporal !== null) secondsBy.temporal = (await readStat(subjects.temporal))?.seconds ?? Number.NaN;
  if (subjects.postgres !== null) secondsBy.postgres = await processTreeSeconds(subjects.postgres);
  if (subjects.worker !== null) secondsBy.worker = (await readStat(subjects.worker))?.seconds ?? Number.NaN;
  return { atMs: performance.now(), secondsBy };
}

export function cpuBetween(before: CpuSnapshot, after: CpuSnapshot): CpuUsage {
  const wallSeconds = (after.atMs - before.atMs) / 1000;
  const usage: CpuUsage = {};
  for (const [name, seconds] of Object.entries(after.secondsBy)) {
    const earlier = before.secondsBy[name];
    if (earlier === undefined || wallSeconds <= 0) continue;
    usage[name] = Math.round(((seconds - earlier) / wallSeconds) * 100);
  }
  return usage;
}

/** Runs `phase` and reports the CPU each component used while it ran. */
export async function withCpu<T>(subjects: CpuSubjects, phase: () => Promise<T>): Promise<{ value: T; cpuPercent: CpuUsage }> {
  const before = await takeCpuSnapshot(subjects);
  const value = await phase();
  const after = await takeCpuSnapshot(subjects);
  return { value, cpuPercent: cpuBetween(before, after) };
}
