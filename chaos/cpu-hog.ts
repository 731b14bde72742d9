import { spawn, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';

/**
 * Competition for the CPU: `count` Node processes that busy-loop until stopped, as another heavy
 * tenant of the machine would. The service under test should degrade (refuse new work at once,
 * decide what it admitted), not collapse. One per core by default.
 */
export interface CpuHogs {
  count: number;
  /** The hogs' process ids. */
  pids: number[];
  stop(): void;
}

export interface CpuHogOptions {
  /** Busy-looping processes; one per core by default. */
  count?: number;
  /**
   * 'own': the hogs run in a session of their own, as another program on the machine does (started
   * by another login or service), and so in a scheduler autogroup of their own, weighed against the
   * service's groups as one. 'shared': in this process's session, sharing its autogroup with
   * whatever else this process started there (the worst case for those processes). Default 'own'.
   */
  session?: 'own' | 'shared';
}

/**
 * Each hog leaves when the process that started it is gone (asked of the kernel every 2^24 turns of
 * its loop, a few times a second): a hog in a session of its own would otherwise outlive a bench
 * that crashed. That process's pid is handed over as an argument, not read as the hog's parent at
 * its start: a starter that ends at once may be gone before the hog has started.
 */
const hogSource =
  'const starter = Number(process.argv[1]); for (let turn = 1; ; turn++) { if ((turn & 0xffffff) === 0) { try { process.kill(starter, 0); } catch { process.exit(0); } } }';

export function startCpuHogs(options: CpuHogOptions = {}): CpuHogs {
  const count = options.count ?? availableParallelism();
  const detached = (options.session ?? 'own') === 'own';
  const children: ChildProcess[] = Array.from({ length: count }, () => spawn(process.execPath, ['-e', hogSource, String(process.pid)], { stdio: 'ignore', detached }));
  return {
    count,
    pids: children.map((child) => child.pid!),
    stop: () => {
      for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}
