/**
 * Recognises a Temporal dev server whose SQLite store has gone bad while the process lives on: every
 * operation then fails with SQLite's `interrupted (9)` (SQLITE_INTERRUPT), tens of times a second,
 * and keeps failing; the process never exits, so nothing that waits for an exit notices. Seen once in
 * this project's test runs (25,695 such errors in ten minutes, every Temporal call refused), and
 * reported upstream for the dev server (temporalio/temporal issues 3784 and 8017). A fresh process
 * on the same file serves again: the fault lives in the process's connection, not in the file.
 *
 * One such line is not the fault: a single query cut short by a cancelled request logs the same
 * words. Only a burst is: `faultLines` of them within `windowMs`.
 */
export interface StoreFaultLimits {
  /** Lines naming the interrupt within the window that mean the store is failing, not one query. */
  faultLines: number;
  windowMs: number;
  /** Restarts this fault may cause in one server's life; past it the fault is said and left. */
  maxRestarts: number;
}

/** 50 in 10 s: the poisoned store logged about 40 a second; a cancelled query logs one. At most 3 restarts. */
export const defaultStoreFaultLimits: StoreFaultLimits = { faultLines: 50, windowMs: 10_000, maxRestarts: 3 };

const interruptedPattern = /interrupted \(9\)/;

export class SqliteStoreFaultDetector {
  private readonly seenAtMs: number[] = [];

  constructor(private readonly limits: StoreFaultLimits) {
    if (!(limits.faultLines >= 1 && limits.windowMs >= 1)) throw new Error(`store fault limits must be positive, got ${JSON.stringify(limits)}`);
  }

  /** Feeds one line of the server's output; true when it completes a burst (the store is failing). */
  see(line: string, nowMs: number): boolean {
    if (!interruptedPattern.test(line)) return false;
    this.seenAtMs.push(nowMs);
    while (this.seenAtMs.length > 0 && this.seenAtMs[0]! <= nowMs - this.limits.windowMs) this.seenAtMs.shift();
    // Bounded: never more entries than one burst needs.
    if (this.seenAtMs.length > this.limits.faultLines) this.seenAtMs.shift();
    return this.seenAtMs.length >= this.limits.faultLines;
  }

  /** Forgets what it saw: a restarted server starts with a clean count. */
  reset(): void {
    this.seenAtMs.length = 0;
  }
}
