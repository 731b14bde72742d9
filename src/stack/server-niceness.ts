import { errorCode, raiseProcessTreeNiceness } from '../support/thread-niceness.js';

/**
 * Runs an embedded server (PostgreSQL, Temporal) and everything it has forked at niceness
 * `niceness`, once it has started: on a host where the API shares the cores with the servers behind
 * it, a refusal the API answers in milliseconds is not queued for a CPU behind the work it refused
 * to add to (docs/limits.md, Priority of the processes behind the API). 0 leaves the server as it
 * was started. A failure is said and the server runs at the priority it has: priority is a matter
 * of latency, never of correctness.
 */
export function reniceServer(name: string, pid: number, niceness: number, log: (line: string) => void): void {
  if (niceness === 0 || pid <= 0) return;
  try {
    const processes = raiseProcessTreeNiceness(pid, niceness);
    log(`${name}: niceness ${niceness} on ${processes} process${processes === 1 ? '' : 'es'} (pid ${pid} and what it forked)`);
  } catch (error) {
    log(`${name}: niceness not set to ${niceness} (${errorCode(error) ?? (error as Error).message}): running at its current priority`);
  }
}
