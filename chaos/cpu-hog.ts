import { spawn, type ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';

/**
 * Competition for the CPU: `count` Node processes that busy-loop until stopped, as another heavy
 * tenant of the machine would. The service under test should degrade (refuse new work at once,
 * decide what it admitted), not collapse. One per core by default.
 */
export interface CpuHogs {
  count: number;
  stop(): void;
}

export function startCpuHogs(count: number = availableParallelism()): CpuHogs {
  const children: ChildProcess[] = Array.from({ length: count }, () =>
    spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }),
  );
  return {
    count,
    stop: () => {
      for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
}
