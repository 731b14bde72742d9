import { readdirSync } from 'node:fs';
import { setPriority } from 'node:os';

/**
 * Sets the niceness of every thread of process `pid` (Linux applies a priority per thread: setting
 * it on the pid alone leaves the threads Node, V8 and native add-ons already started as they
 * were; threads started later inherit it from the thread that starts them). Raising the niceness of
 * one's own children needs no privilege; lowering it does. Returns how many threads were set.
 */
export function setProcessNiceness(pid: number, niceness: number): number {
  let tids: number[];
  try {
    tids = readdirSync(`/proc/${pid}/task`).map(Number).filter(Number.isInteger);
  } catch {
    // No /proc (not Linux): the process's own priority is what there is to set.
    tids = [pid];
  }
  let set = 0;
  for (const tid of tids) {
    try {
      setPriority(tid, niceness);
      set += 1;
    } catch (error) {
      // A thread that ended since the listing is fine; anything else is the caller's to know.
      const code = (error as { code?: string; info?: { code?: string } }).info?.code ?? (error as { code?: string }).code;
      if (code !== 'ESRCH') throw error;
    }
  }
  return set;
}
