import { errorCode, raiseAutogroupNiceness, raiseProcessTreeNiceness } from '../support/thread-niceness.js';

/**
 * Runs an embedded server (PostgreSQL, Temporal) and everything it has forked at niceness
 * `niceness`, once it has started: on a host where the API shares the cores with the servers behind
 * it, a refusal the API answers in milliseconds is not queued for a CPU behind the work it refused
 * to add to (docs/limits.md, Priority of the processes behind the API). 0 leaves the server as it
 * was started. A failure is said and the server runs at the priority it has: priority is a matter
 * of latency, never of correctness.
 *
 * The servers run in sessions of their own (detached: Ctrl-C reaches the stack, which stops them in
 * order), and Linux's scheduler autogroups give each session a fair share of the CPU as a group
 * before threads' niceness counts: so the group is reniced as well as every thread.
 */
export function reniceServer(name: string, pid: number, niceness: number, log: (line: string) => void): void {
  if (niceness === 0 || pid <= 0) return;
  try {
    const processes = raiseProcessTreeNiceness(pid, niceness);
    // A server started in a session of its own has a scheduler group of its own too, weighed
    // against the API's by the group's niceness alone: without it the threads' niceness changes
    // nothing against the API.
    const group = raiseAutogroupNiceness(pid, niceness);
    log(`${name}: niceness ${niceness} on ${processes} process${processes === 1 ? '' : 'es'} (pid ${pid} and what it forked)${group ? ' and on its scheduler autogroup' : ''}`);
  } catch (error) {
    log(`${name}: niceness not set to ${niceness} (${errorCode(error) ?? (error as Error).message}): running at its current priority`);
  }
}
