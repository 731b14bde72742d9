import { rm, writeFile } from 'node:fs/promises';
import { readFileIfPresent } from '../support/files.js';
import { pollUntil } from '../support/wait.js';

/**
 * A small JSON file next to a server's data recording which Node process owns the server.
 *
 * If that Node process dies without stopping its children (SIGKILL, crash, a killed test run),
 * the servers keep running as orphans, holding the data. Postgres then refuses to start, and a
 * second Temporal dev server would share the SQLite file with the first. The lock lets the next
 * start tell "orphan, safe to stop" from "someone is using this right now".
 */
interface LockContent {
  ownerPid: number;
  ownerStartTicks: string | null;
  serverPid: number;
  serverStartTicks: string | null;
  startedAt: string;
}

/** Kernel start time of a process (clock ticks since boot): tells a pid apart from its reuse. */
async function processStartTicks(pid: number): Promise<string | null> {
  const stat = await readFileIfPresent(`/proc/${pid}/stat`);
  if (stat === null) return null;
  // Fields after the parenthesised command name, which itself may contain spaces.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return fields[19] ?? null;
}

async function isRunning(pid: number, startTicks: string | null): Promise<boolean> {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const stat = await readFileIfPresent(`/proc/${pid}/stat`);
  if (stat === null) return true; // no /proc: trust kill(0)
  if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) return false; // exited, not yet reaped
  return startTicks === null || (await processStartTicks(pid)) === startTicks;
}

/**
 * Handles a lock left by an earlier start: fails if its owner is still alive, stops its server if
 * the owner is gone but the server is not, and removes the lock.
 */
export async function reclaimServerLock(
  lockPath: string,
  opts: { what: string; stopSignal: NodeJS.Signals; graceMs: number; log: (line: string) => void },
): Promise<void> {
  const raw = await readFileIfPresent(lockPath);
  if (raw === null) return;
  let lock: LockContent;
  try {
    lock = JSON.parse(raw) as LockContent;
  } catch {
    await rm(lockPath, { force: true });
    return;
  }
  if (await isRunning(lock.ownerPid, lock.ownerStartTicks)) {
    throw new Error(
      `${opts.what} is already in use by process ${lock.ownerPid} (server pid ${lock.serverPid}, since ${lock.startedAt}); ` +
        `stop that process first (lock file ${lockPath})`,
    );
  }
  if (await isRunning(lock.serverPid, lock.serverStartTicks)) {
    if (lock.serverStartTicks === null) {
      throw new Error(
        `${opts.what} may still be served by an orphaned process ${lock.serverPid} whose owner is gone; ` +
          `stop it (kill ${lock.serverPid}) and delete ${lockPath}`,
      );
    }
    opts.log(`stopping orphaned server pid ${lock.serverPid} left by dead process ${lock.ownerPid}`);
    process.kill(lock.serverPid, opts.stopSignal);
    const gone = async (): Promise<boolean> => !(await isRunning(lock.serverPid, lock.serverStartTicks));
    if (!(await pollUntil(gone, { deadlineMs: Date.now() + opts.graceMs })).ok) {
      opts.log(`orphaned server pid ${lock.serverPid} ignored ${opts.stopSignal}; killing it`);
      process.kill(lock.serverPid, 'SIGKILL');
      if (!(await pollUntil(gone, { deadlineMs: Date.now() + 5_000 })).ok) {
        throw new Error(`could not stop orphaned server pid ${lock.serverPid} of ${opts.what}`);
      }
    }
  }
  await rm(lockPath, { force: true });
}

export async function writeServerLock(lockPath: string, serverPid: number): Promise<void> {
  const lock: LockContent = {
    ownerPid: process.pid,
    ownerStartTicks: await processStartTicks(process.pid),
    serverPid,
    serverStartTicks: await processStartTicks(serverPid),
    startedAt: new Date().toISOString(),
  };
  await writeFile(lockPath, `${JSON.stringify(lock, null, 2)}\n`);
}

export async function removeServerLock(lockPath: string): Promise<void> {
  await rm(lockPath, { force: true });
}
