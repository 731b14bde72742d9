import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { terminate } from '../../src/support/child-process.js';
import type { OpenLoopReport, OpenLoopSchedule, Target } from './overload-calls.js';

const callerSource = fileURLToPath(new URL('./open-loop-caller-process.ts', import.meta.url));

/** How long the caller process may take to start, milliseconds. */
const callerStartBudgetMs = 30_000;

/**
 * Runs open-loop schedules from a process of its own (open-loop-caller-process.ts), forked with the
 * bench's Node flags (tsx's loader), so that the bench's own event loop is not part of what a
 * caller's latency measures. Answers once every answer is in.
 */
export async function runOpenLoops(
  target: Target,
  schedules: OpenLoopSchedule[],
  /** Kept-alive connections the caller opens before its first arrival (0: a cold caller). */
  warmConnections: number,
): Promise<OpenLoopReport> {
  const child = fork(callerSource, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  try {
    await nextMessage<{ type: 'ready' }>(child, 'ready', callerStartBudgetMs);
    const report = nextMessage<{ type: 'report'; report: OpenLoopReport }>(child, 'report', null);
    child.send({ type: 'run', target, schedules, warmConnections });
    return (await report).report;
  } finally {
    await terminate(child, { signal: 'SIGTERM', graceMs: 2_000 });
  }
}

function nextMessage<M extends { type: string }>(child: ReturnType<typeof fork>, type: M['type'], budgetMs: number | null): Promise<M> {
  return new Promise((resolve, reject) => {
    const timer = budgetMs === null ? undefined : setTimeout(() => settle(new Error(`the open-loop caller sent no '${type}' within ${budgetMs} ms`)), budgetMs);
    const onMessage = (message: M): void => {
      if (message.type === type) settle(null, message);
    };
    const onExit = (code: number | null): void => settle(new Error(`the open-loop caller exited (code ${code}) before '${type}'`));
    function settle(error: Error | null, message?: M): void {
      clearTimeout(timer);
      child.off('message', onMessage);
      child.off('exit', onExit);
      if (error) reject(error);
      else resolve(message!);
    }
    child.on('message', onMessage);
    child.once('exit', onExit);
  });
}
