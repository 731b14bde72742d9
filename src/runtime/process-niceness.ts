import { getPriority } from 'node:os';
import { errorCode, raiseProcessNiceness } from '../support/thread-niceness.js';

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
