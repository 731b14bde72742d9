import { readdirSync, readFileSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

/** The threads of process `pid` (Linux keeps a priority per thread); without /proc, the process alone. */
function threadIds(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).map(Number).filter(Number.isInteger);
  } catch {
    return [pid];
  }
}

function errorCode(error: unknown): string | undefined {
  return (error as { info?: { code?: string } }).info?.code ?? (error as { code?: string }).code;
}

/**
 * Raises every thread of process `pid` to niceness `niceness` at least (Linux applies a priority
 * per thread: setting it on the pid alone leaves the threads Node, V8 and native add-ons already
 * started as they were; threads started later inherit it from the thread that starts them). A
 * thread already nicer is left as it is: lowering a niceness needs a privilege a service does not
 * have, and an operator who started the process nicer meant it. Returns how many threads were set.
 */
export function raiseProcessNiceness(pid: number, niceness: number): number {
  let set = 0;
  for (const tid of threadIds(pid)) {
    try {
      if (getPriority(tid) >= niceness) continue;
      setPriority(tid, niceness);
      set += 1;
    } catch (error) {
      // A thread that ended since the listing is fine; anything else is the caller's to know.
      if (errorCode(error) !== 'ESRCH') throw error;
    }
  }
  return set;
}

/**
 * The niceness of each thread of process `pid` (field 19 of /proc/<pid>/task/<tid>/stat), or null
 * where there is no /proc: what a process actually runs at, for a bench's report or a test.
 */
export function threadNiceness(pid: number): number[] | null {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return null;
  }
  const values: number[] = [];
  for (const tid of tids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue; // ended since the listing
    }
    // The command name (field 2) is in parentheses and may hold spaces: count from its closing one.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    values.push(Number(fields[19 - 3]));
  }
  return values;
}

/**
 * A worker process's first act (CHARGEGUARD_WORKER_NICENESS, docs/limits.md, Worker priority):
 * every thread it has, and so every thread it starts later, runs at `niceness`, so that on a host
 * shared with an API process the API's refusals are not queued behind the worker for the CPU. 0
 * leaves the priority as it is; a failure is logged and the worker runs at the priority it has.
 */
export function applyWorkerNiceness(niceness: number, log: (line: string) => void): void {
  if (niceness === 0) {
    log(`worker niceness left as it is (${getPriority(0)}): CHARGEGUARD_WORKER_NICENESS=0`);
    return;
  }
  try {
    const threads = raiseProcessNiceness(process.pid, niceness);
    log(`worker niceness ${niceness} (CHARGEGUARD_WORKER_NICENESS) on ${threads} threads: an API on the same host goes first for the CPU`);
  } catch (error) {
    log(`worker niceness not set to ${niceness} (${errorCode(error) ?? (error as Error).message}): running at the current priority (${getPriority(0)})`);
  }
}
