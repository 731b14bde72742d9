import { constants } from 'node:os';
import type { ProcessSafetyNet } from '../runtime/process-safety.js';

/** The signals that ask a long-running command to stop: Ctrl-C, a supervisor's stop, a closed terminal. */
export const shutdownSignals: readonly NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

let firstShutdownSignal: Promise<NodeJS.Signals> | null = null;

/**
 * Resolves on the first SIGINT, SIGTERM or SIGHUP, so long-running commands stop cleanly; the same
 * promise for every caller, and listening from the first call on, so a command that calls it before
 * it starts its servers keeps a Ctrl-C that arrives while they start (instead of dying with them half
 * up) and stops once they are.
 *
 * The servers `start` runs (PostgreSQL, the Temporal dev server) are in process groups of their own,
 * so a Ctrl-C in the terminal reaches only this process, which stops them in order: the worker and
 * the pool first, PostgreSQL last. So a second signal must still end the process: it exits at once,
 * and the exit hooks signal the servers it started (embedded-postgres.ts, child-process.ts).
 */
export function waitForShutdownSignal(): Promise<NodeJS.Signals> {
  firstShutdownSignal ??= new Promise((resolve) => {
    let received = false;
    const onSignal = (signal: NodeJS.Signals): void => {
      if (!received) {
        received = true;
        resolve(signal);
        return;
      }
      process.stderr.write(`received ${signal} again: exiting at once (the servers this process started are signalled to stop)\n`);
      process.exit(128 + (constants.signals[signal] ?? 0));
    };
    for (const signal of shutdownSignals) process.on(signal, onSignal);
  });
  return firstShutdownSignal;
}

/**
 * Resolves with why a long-running command must stop: a signal, an uncaught exception (the safety
 * net's `fatal`), or one of `others` (a worker that stopped), so every way out runs the same cleanup.
 * A rejection of one of `others` is turned into a reason too: the cleanup must run before it is reported.
 */
export function waitForStopReason(
  safety: ProcessSafetyNet,
  others: Record<string, Promise<unknown>> = {},
): Promise<{ reason: string; error?: unknown }> {
  return Promise.race([
    waitForShutdownSignal().then((signal) => ({ reason: `received ${signal}` })),
    safety.fatal.then((error) => ({ reason: 'uncaught exception', error })),
    ...Object.entries(others).map(([what, promise]) =>
      promise.then(
        () => ({ reason: `${what} stopped` }),
        (error: unknown) => ({ reason: `${what} failed: ${(error as Error)?.message ?? String(error)}`, error }),
      ),
    ),
  ]);
}
