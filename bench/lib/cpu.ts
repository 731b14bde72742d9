import { readdir } from 'node:fs/promises';
import { readFileIfPresent } from '../../src/support/files.js';

/** Which processes to charge CPU time to; a postgres entry also counts its backends. */
export interface CpuSubjects {
  temporal: number | null;
  postgres: number | null;
  /** Worker process(es) when the worker runs apart from the load generator; several are summed. */
  worker: number | readonly number[] | null;
  /** Also read the whole machine's busy time (reported as `machine`, percent of one core). */
  machine?: boolean;
  /** More single processes (all their threads), each reported under its name. */
  processes?: Record<string, number>;
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

/**
 * CPU time every process of the machine spent busy (all cores, from /proc/stat): set beside the
 * components', it tells whether the cores were full and how much of them went to processes outside
 * the run (on a shared machine, other people's work).
 */
async function machineBusySeconds(): Promise<number | null> {
  const text = await readFileIfPresent('/proc/stat');
  const fields = text?.split('\n')[0]?.trim().split(/\s+/).slice(1, 9).map(Number);
  if (fields === undefined || fields.length < 5 || fields.some((n) => !Number.isFinite(n))) return null;
  // user nice system idle iowait irq softirq steal (guest time is inside user): busy is everything but idle and iowait.
  const busyTicks = fields.reduce((sum, n, i) => (i === 3 || i === 4 ? sum : sum + n), 0);
  return busyTicks / ticksPerSecond;
}

export async function takeCpuSnapshot(subjects: CpuSubjects): Promise<CpuSnapshot> {
  const usage = process.cpuUsage();
  const secondsBy: Record<string, number> = { bench: (usage.user + usage.system) / 1e6 };
  if (subjects.temporal !== null) secondsBy.temporal = (await readStat(subjects.temporal))?.seconds ?? Number.NaN;
  if (subjects.postgres !== null) secondsBy.postgres = await processTreeSeconds(subjects.postgres);
  const workers = subjects.worker === null ? [] : typeof subjects.worker === 'number' ? [subjects.worker] : subjects.worker;
  if (workers.length > 0) {
    const stats = await Promise.all(workers.map(readStat));
    secondsBy.worker = stats.reduce((sum, stat) => sum + (stat?.seconds ?? Number.NaN), 0);
  }
  for (const [name, pid] of Object.entries(subjects.processes ?? {})) secondsBy[name] = (await readStat(pid))?.seconds ?? Number.NaN;
  const machine = subjects.machine === true ? await machineBusySeconds() : null;
  if (machine !== null) secondsBy.machine = machine;
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
