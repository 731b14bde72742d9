import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { setPriority } from 'node:os';

/**
 * Sets (up or down) the niceness of this process's embedded servers, for bench:overload's same-run
 * A/B of CHARGEGUARD_EMBEDDED_SERVER_NICENESS: every thread of every descendant named `postgres` or
 * `temporal`, and the scheduler autogroup of each that leads its session. Lowering a niceness needs
 * privilege (root, or CAP_SYS_NICE): without it this throws, and the bench says so. Returns the
 * processes set.
 */
export function setServerNiceness(niceness: number): number {
  const parents = new Map<number, number>();
  const names = new Map<number, string>();
  const sessions = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parents.set(Number(entry), Number(fields[1]));
      sessions.set(Number(entry), Number(fields[3]));
      names.set(Number(entry), stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')));
    } catch {
      // ended since the listing
    }
  }
  const ours = (pid: number): boolean => {
    for (let at = parents.get(pid), hops = 0; at !== undefined && at > 1 && hops < 64; at = parents.get(at), hops += 1) if (at === process.pid) return true;
    return false;
  };
  let set = 0;
  for (const [pid, name] of names) {
    if ((name !== 'postgres' && name !== 'temporal') || !ours(pid)) continue;
    for (const tid of readdirSync(`/proc/${pid}/task`)) setPriority(Number(tid), niceness);
    if (sessions.get(pid) === pid) writeFileSync(`/proc/${pid}/autogroup`, String(niceness));
    set += 1;
  }
  return set;
}
