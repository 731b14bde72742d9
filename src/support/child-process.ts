import type { ChildProcess } from 'node:child_process';

/** Whether a process with this pid exists (one owned by another user counts: signalling it is refused, not missing). */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function hasExited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** Resolves true once `child` has exited, or false if it is still running after `timeoutMs`. */
export async function waitForExit(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (hasExited(child)) return true;
  return new Promise<boolean>((resolve) => {
    const onExit = (): void => {
      clearTimeout(timer);
      resolve(true);
    };
    const timer = setTimeout(() => {
      child.off('exit', onExit);
      resolve(hasExited(child));
    }, timeoutMs);
    child.once('exit', onExit);
  });
}

/**
 * Asks `child` to stop with `signal`, escalating to SIGKILL after `graceMs`.
 * Resolves once the process has exited; returns whether it had to be killed.
 */
export async function terminate(
  child: ChildProcess,
  opts: { signal: NodeJS.Signals; graceMs: number; killWaitMs?: number },
): Promise<{ forced: boolean }> {
  if (hasExited(child)) return { forced: false };
  child.kill(opts.signal);
  if (await waitForExit(child, opts.graceMs)) return { forced: false };
  child.kill('SIGKILL');
  if (!(await waitForExit(child, opts.killWaitMs ?? 5000))) {
    throw new Error(`Process ${child.pid ?? '?'} did not exit even after SIGKILL`);
  }
  return { forced: true };
}

/**
 * Kills `child` if this Node process exits first (e.g. process.exit() from a signal handler), so a
 * server does not outlive the program that owns it. Returns a function that removes the hook.
 */
export function killOnParentExit(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): () => void {
  const onExit = (): void => {
    if (!hasExited(child)) child.kill(signal);
  };
  process.once('exit', onExit);
  return () => process.off('exit', onExit);
}
