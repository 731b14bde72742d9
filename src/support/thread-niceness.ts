import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

/** The threads of process `pid` (Linux keeps a priority per thread); without /proc, the process alone. */
function threadIds(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).map(Number).filter(Number.isInteger);
  } catch {
    return [pid];
  }
}

export function errorCode(error: unknown): string | undefined {
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

/** Every descendant of process `root` (children, their children, …), found by their parents in /proc; none without /proc. */
function descendantsOf(root: number): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  const childrenOf = new Map<number, number[]>();
  for (const entry of entries) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // ended since the listing
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    childrenOf.set(ppid, [...(childrenOf.get(ppid) ?? []), pid]);
  }
  const found: number[] = [];
  const queue = [...(childrenOf.get(root) ?? [])];
  while (queue.length > 0) {
    const pid = queue.shift()!;
    found.push(pid);
    queue.push(...(childrenOf.get(pid) ?? []));
  }
  return found;
}

/**
 * Raises every thread of process `root` and of all its descendants to niceness `niceness` at
 * least (raiseProcessNiceness on each): a server that forks (PostgreSQL's postmaster, its
 * background processes and the backends it has started) is reniced whole, and what it forks later
 * inherits the postmaster's niceness. Returns the processes it looked at.
 */
export function raiseProcessTreeNiceness(root: number, niceness: number): number {
  // The root first: what it forks from then on inherits the niceness, so the descendants listed
  // after it are every one that could still be at the old one (listed first, a child forked between
  // the listing and the root's change would be missed).
  raiseProcessNiceness(root, niceness);
  const descendants = descendantsOf(root);
  for (const pid of descendants) raiseProcessNiceness(pid, niceness);
  return 1 + descendants.length;
}

/**
 * Raises the niceness of the scheduler autogroup that process `pid` leads (Linux, with
 * CONFIG_SCHED_AUTOGROUP and kernel.sched_autogroup_enabled): a process that started a session of
 * its own (setsid, as a detached child does) is put in a task group of its own, and the scheduler
 * shares the CPU fairly between groups before it looks at a thread's niceness, so threads reniced
 * in such a group still take a whole group's share from the processes of every other session.
 * Only the group's own niceness (/proc/<pid>/autogroup) weighs it against the others. A process
 * that is not a session leader shares its parent's group, which is not this function's to change.
 * Returns whether the group was set; false where there is no such group or it is already nicer.
 */
export function raiseAutogroupNiceness(pid: number, niceness: number): boolean {
  let stat: string;
  let autogroup: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    autogroup = readFileSync(`/proc/${pid}/autogroup`, 'utf8');
  } catch (error) {
    if (errorCode(error) === 'ENOENT' || errorCode(error) === 'ESRCH') return false; // no /proc, no autogroups, or ended
    throw error;
  }
  const session = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[3]);
  if (session !== pid) return false;
  const current = Number(/nice (-?\d+)/.exec(autogroup)?.[1]);
  if (current >= niceness) return false;
  writeFileSync(`/proc/${pid}/autogroup`, String(niceness));
  return true;
}
