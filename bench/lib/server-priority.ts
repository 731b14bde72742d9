import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { setPriority } from 'node:os';

interface OwnServer {
  pid: number;
  name: 'postgres' | 'temporal';
  /** Its parent is a server of the same name: a PostgreSQL backend or helper, not the postmaster. */
  forked: boolean;
  leadsSession: boolean;
}

/** This process's descendants named `postgres` or `temporal` (the embedded servers and their forks), from /proc. */
function ownServers(): OwnServer[] {
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
  const servers: OwnServer[] = [];
  for (const [pid, name] of names) {
    if ((name !== 'postgres' && name !== 'temporal') || !ours(pid)) continue;
    servers.push({ pid, name, forked: names.get(parents.get(pid) ?? 0) === name, leadsSession: sessions.get(pid) === pid });
  }
  return servers;
}

/** The postmaster and the Temporal server this process started (null when there is none, or more than one). */
export function embeddedServerPids(): { postgres: number | null; temporal: number | null } {
  const roots = ownServers().filter((server) => !server.forked);
  const only = (name: OwnServer['name']): number | null => {
    const found = roots.filter((server) => server.name === name);
    return found.length === 1 ? found[0]!.pid : null;
  };
  return { postgres: only('postgres'), temporal: only('temporal') };
}

/**
 * Sets (up or down) the niceness of this process's embedded servers, for bench:overload's same-run
 * A/B of CHARGEGUARD_EMBEDDED_SERVER_NICENESS: every thread of every descendant named `postgres` or
 * `temporal`, and the scheduler autogroup of each that leads its session. Lowering a niceness needs
 * privilege (root, or CAP_SYS_NICE): without it this throws, and the bench says so. Returns the
 * processes set.
 */
export function setServerNiceness(niceness: number): number {
  const servers = ownServers();
  for (const server of servers) {
    for (const tid of readdirSync(`/proc/${server.pid}/task`)) setPriority(Number(tid), niceness);
    if (server.leadsSession) writeFileSync(`/proc/${server.pid}/autogroup`, String(niceness));
  }
  return servers.length;
}
