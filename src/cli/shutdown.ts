import type { ProcessSafetyNet } from '../runtime/process-safety.js';

/** Resolves on the first SIGINT or SIGTERM, so long-running commands stop cleanly. */
export function waitForShutdownSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const onSignal = (signal: NodeJS.Signals) => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      resolve(signal);
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
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
