/**
 * Admission of new charges: one process starts a new charge only while fewer than
 * `maxChargesInFlight` of the charges it started are undecided. Beyond that a new key is refused at
 * once (OverloadedError: 503 with Retry-After), before anything is recorded or started, so that
 * the charges admitted are decided within their wait instead of every charge queueing behind a
 * backlog the workers cannot clear (docs/limits.md, Overload).
 *
 * A charge holds its slot from its admission until its workflow closes, not until its request is
 * answered: a 202 ("still processing") leaves the charge in flight, and a bound on requests alone
 * would let the backlog grow behind every 202. Once the request has been answered the slot is
 * held at most `releaseWatchMaxMs` more (a charge whose worker is gone for good must not hold it
 * forever; the same key retried attaches to it without needing a slot).
 */
export interface ChargeAdmissionOptions {
  /** Charges this process started that may be undecided at once; at least 1. */
  maxChargesInFlight: number;
  /** What a refusal's Retry-After says, whole seconds (at least 1). */
  retryAfterSeconds: number;
  /** How long after its request was answered an undecided charge still holds its slot, milliseconds. */
  releaseWatchMaxMs: number;
}

/** Given back exactly once per slot; later calls do nothing. */
export type ReleaseSlot = () => void;

export const admissionDefaults = {
  /**
   * Measured with `npm run bench:overload`: on a 2-core machine (API, worker, Temporal dev server
   * and PostgreSQL sharing it) throughput stops growing at about 16–32 charges in flight, and 32
   * in flight are decided in about 1 s at peak rate, well within the 10 s wait budget even with
   * the CPU shared. docs/limits.md has the figures.
   */
  maxChargesInFlight: 64,
  retryAfterSeconds: 1,
  releaseWatchMaxMs: 60_000,
} as const;

export class ChargeAdmission {
  private inFlight = 0;
  private refusedCount = 0;

  constructor(readonly options: ChargeAdmissionOptions) {
    if (!Number.isInteger(options.maxChargesInFlight) || options.maxChargesInFlight < 1) {
      throw new Error(`maxChargesInFlight must be a whole number of at least 1, got ${options.maxChargesInFlight}`);
    }
  }

  /** Charges admitted and not yet released. */
  get chargesInFlight(): number {
    return this.inFlight;
  }

  /** New charges refused since the process started. */
  get refused(): number {
    return this.refusedCount;
  }

  /** A slot for a new charge, or null when every slot is taken. */
  tryAcquire(): ReleaseSlot | null {
    if (this.inFlight >= this.options.maxChargesInFlight) return null;
    this.inFlight += 1;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inFlight -= 1;
    };
  }

  /** Counts a refusal (for /metrics). */
  noteRefusal(): void {
    this.refusedCount += 1;
  }
}
