import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { startCpuHogs } from '../chaos/cpu-hog.js';
import { waitFor } from './support/harness.js';

/** The session id and state of a process (/proc/<pid>/stat), or null once it is gone. */
function sessionAndState(pid: number): { session: number; state: string } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0]!, session: Number(fields[3]) };
  } catch {
    return null;
  }
}

const gone = (pid: number): boolean => {
  const found = sessionAndState(pid);
  return found === null || found.state === 'Z';
};

describe('CPU hogs (bench:overload and chaos --cpu-hog)', () => {
  it('run in a session of their own by default, as another program does, or in ours when asked; stop kills them', async () => {
    const own = startCpuHogs({ count: 1 });
    const shared = startCpuHogs({ count: 1, session: 'shared' });
    try {
      const ownPid = own.pids[0]!;
      const sharedPid = shared.pids[0]!;
      expect(sessionAndState(ownPid)?.session).toBe(ownPid);
      expect(sessionAndState(sharedPid)?.session).toBe(sessionAndState(process.pid)?.session);
    } finally {
      own.stop();
      shared.stop();
    }
    await waitFor(async () => gone(own.pids[0]!) && gone(shared.pids[0]!), { timeoutMs: 10_000, what: 'the hogs to end once stopped' });
  });

  it('leave when the process that started them is gone (a crashed bench leaves no busy loop behind)', async () => {
    // A parent that starts a hog in a session of its own, prints its pid and exits without stopping it.
    const parent = spawn(
      process.execPath,
      ['--import', 'tsx', '-e', "import('./chaos/cpu-hog.ts').then(({ startCpuHogs }) => { console.log(startCpuHogs({ count: 1 }).pids[0]); process.exit(0); })"],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let output = '';
    parent.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    await new Promise((resolve) => parent.once('exit', resolve));
    const hogPid = Number(output.trim());
    expect(Number.isInteger(hogPid) && hogPid > 0, `the parent printed ${JSON.stringify(output)}`).toBe(true);
    try {
      await waitFor(async () => gone(hogPid), { timeoutMs: 10_000, what: `the orphaned hog ${hogPid} to leave` });
    } finally {
      if (!gone(hogPid)) process.kill(hogPid, 'SIGKILL');
    }
  });
});
