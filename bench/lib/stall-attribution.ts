/**
 * Reads what the stall probe (stall-probe.mjs, preloaded into the API process) recorded, and
 * names, for each slow refusal, what the API process was doing while the request waited before
 * its onRequest: the window from the caller's send to the head's arrival less the API's own total.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Answer } from './overload-calls.js';

/** Give to `node --import` (before the script) to load the probe into a process. */
export const stallProbeUrl = new URL('./stall-probe.mjs', import.meta.url).href;
export const stallProbePath = fileURLToPath(stallProbeUrl);

type ProbeRecord =
  | { kind: 'gap'; from: number; ms: number; cpuMs: number; runQueueMs: number }
  | { kind: 'gc'; from: number; ms: number; gcKind?: number }
  | { kind: 'write'; from: number; ms: number; fd: number }
  | { kind: 'async-write'; from: number; ms: number; fd: number }
  | { kind: 'write-error'; from: number; fd: number; code?: string }
  | { kind: 'first-request'; from: number; ms: number; url: string }
  | { kind: 'request'; key: string; at: number; connectedAt?: number }
  | { kind: 'totals'; at: number; lines: number; bytes: number; connections: number };

export async function readProbe(filePath: string): Promise<ProbeRecord[]> {
  const text = await readFile(filePath, 'utf8').catch(() => '');
  return text.split('\n').filter((line) => line.trim() !== '').map((line) => JSON.parse(line) as ProbeRecord);
}

/** The causes a stall is put down to: whichever of them took most of its wait. */
export const stallCauses = [
  'GC pause',
  'log write slow to return',
  'loop busy on its CPU (not GC)',
  'loop waiting for a CPU (run queue)',
  'loop blocked off CPU (system call)',
  'nothing recorded in the API process',
] as const;
export type StallCause = (typeof stallCauses)[number];

export interface StallReport {
  /** Slow refusals per cause. */
  causes: Record<StallCause, number>;
  gcPauses: { count: number; totalMs: number; maxMs: number };
  loopGaps: { count: number; maxMs: number; cpuMs: number; runQueueMs: number; offCpuMs: number };
  slowWrites: number;
  writeErrors: number;
  /** Lines the API wrote to stdout/stderr during the phase, per refusal. */
  linesPerRefusal: number;
  newConnections: number;
  /** Slow refusals whose request opened a new connection, and the median of their send → accept, ms. */
  onNewConnections: { count: number; acceptedAfterP50Ms: number };
  /** One line per slow refusal: its wait and how much of it each cause covers, for the log. */
  details: string[];
}

/** Milliseconds of [start, end) that [from, from + ms) covers. */
function covered(r: { from: number; ms: number }, start: number, end: number): number {
  return Math.max(0, Math.min(end, r.from + r.ms) - Math.max(start, r.from));
}

/**
 * What kept each slow refusal (head later than `slowMs`) from reaching onRequest sooner: of its
 * wait (send → head, less the API's own total), how much each recorded event covers; a loop gap is
 * split by how the main thread spent it (on a CPU, in the run queue, off CPU) in proportion, and
 * GC pauses are taken out of its time on a CPU. The largest share names the cause, unless the
 * records cover less than a fifth of the wait.
 */
export function attributeStalls(records: ProbeRecord[], fromMs: number, toMs: number, refused: Answer[], slowMs = 100): StallReport {
  const at = (r: ProbeRecord) => (r.kind === 'totals' || r.kind === 'request' ? r.at : r.from);
  const within = records.filter((r) => at(r) >= fromMs - 30_000 && at(r) <= toMs + 30_000);
  const of = <K extends ProbeRecord['kind']>(kind: K) => within.filter((r): r is Extract<ProbeRecord, { kind: K }> => r.kind === kind);
  const inPhase = <R extends ProbeRecord>(rs: R[]) => rs.filter((r) => at(r) >= fromMs && at(r) <= toMs);
  const gaps = of('gap');
  const gcs = of('gc');
  const writes = [...of('write'), ...of('async-write')];
  const parsed = new Map(of('request').map((r) => [r.key, r]));
  const causes = Object.fromEntries(stallCauses.map((c) => [c, 0])) as Record<StallCause, number>;
  const details: string[] = [];
  const acceptedAfter: number[] = [];
  const sumOver = <R extends { from: number; ms: number }>(rs: R[], start: number, end: number, weight: (r: R) => number = () => 1) =>
    rs.reduce((sum, r) => sum + covered(r, start, end) * weight(r), 0);
  for (const answer of refused.filter((a) => a.headMs > slowMs && a.stages.total !== undefined)) {
    const start = answer.sentAtMs;
    const end = answer.sentAtMs + answer.headMs - answer.stages.total!;
    const waitMs = end - start;
    const gcMs = sumOver(gcs, start, end);
    const share: Record<StallCause, number> = {
      'GC pause': gcMs,
      'log write slow to return': sumOver(of('write'), start, end),
      'loop busy on its CPU (not GC)': Math.max(0, sumOver(gaps, start, end, (g) => g.cpuMs / g.ms) - gcMs),
      'loop waiting for a CPU (run queue)': sumOver(gaps, start, end, (g) => g.runQueueMs / g.ms),
      'loop blocked off CPU (system call)': sumOver(gaps, start, end, (g) => Math.max(0, g.ms - g.cpuMs - g.runQueueMs) / g.ms),
      'nothing recorded in the API process': 0,
    };
    const [top, topMs] = Object.entries(share).sort((a, b) => b[1] - a[1])[0] as [StallCause, number];
    const cause: StallCause = topMs >= waitMs / 5 ? top : 'nothing recorded in the API process';
    causes[cause] += 1;
    const parts = Object.entries(share).filter(([, ms]) => ms >= 1).map(([c, ms]) => `${c} ${ms.toFixed(0)}`);
    const request = parsed.get(answer.key);
    if (request?.connectedAt !== undefined) acceptedAfter.push(request.connectedAt - start);
    const seen = request
      ? `parser had it ${(request.at - start).toFixed(0)} ms after the send${request.connectedAt !== undefined ? ` (new connection, accepted at +${(request.connectedAt - start).toFixed(0)} ms)` : ''}`
      : 'parser time not recorded';
    details.push(`sent ${new Date(start).toISOString()} waited ${waitMs.toFixed(0)} ms before onRequest; ${seen}; ${parts.join(', ') || 'nothing recorded'} → ${cause}`);
  }
  const totals = records.filter((r): r is Extract<ProbeRecord, { kind: 'totals' }> => r.kind === 'totals');
  const before = totals.filter((t) => t.at <= fromMs).at(-1) ?? { lines: 0, connections: 0 };
  const after = totals.filter((t) => t.at <= toMs).at(-1) ?? before;
  const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
  const phaseGcs = inPhase(gcs);
  const phaseGaps = inPhase(gaps);
  return {
    causes,
    details,
    gcPauses: { count: phaseGcs.length, totalMs: sum(phaseGcs.map((g) => g.ms)), maxMs: Math.max(0, ...phaseGcs.map((g) => g.ms)) },
    loopGaps: {
      count: phaseGaps.length,
      maxMs: Math.max(0, ...phaseGaps.map((g) => g.ms)),
      cpuMs: sum(phaseGaps.map((g) => g.cpuMs)),
      runQueueMs: sum(phaseGaps.map((g) => g.runQueueMs)),
      offCpuMs: sum(phaseGaps.map((g) => g.ms - g.cpuMs - g.runQueueMs)),
    },
    slowWrites: inPhase(writes).length,
    writeErrors: inPhase(of('write-error')).length,
    linesPerRefusal: refused.length ? (after.lines - before.lines) / refused.length : NaN,
    newConnections: after.connections - before.connections,
    onNewConnections: { count: acceptedAfter.length, acceptedAfterP50Ms: acceptedAfter.sort((a, b) => a - b)[Math.floor(acceptedAfter.length / 2)] ?? NaN },
  };
}
