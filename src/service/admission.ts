import { OverloadedError } from '../domain/errors.js';

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
  /**
   * How long a full process asks Temporal whether a key the ledger does not know has a workflow
   * (started by another process, its Try not yet run) before refusing it, milliseconds; 0: not
   * asked, the ledger alone decides. Default {@link admissionDefaults}.describeBudgetMs.
   */
  describeBudgetMs?: number;
}

/** Given back exactly once per slot; later calls do nothing. */
export type ReleaseSlot = () => void;

export const admissionDefaults = {
  /**
   * Chosen from `npm run bench:overload` and P1: on a quiet 2-core machine 32 charges in flight
   * already give the peak (26–34 decided/s), and more in flight only queue; 32 in flight are
   * decided within the 10 s wait budget as long as the machine decides at least 3.2 charges/s
   * (Little's law), so a machine slowed to a fifth of its peak still answers within the wait.
   * docs/limits.md, Overload, has the figures.
   */
  maxChargesInFlight: 32,
  retryAfterSeconds: 1,
  releaseWatchMaxMs: 60_000,
  /**
   * Not asked by default. Every refusal of a key the ledger does not know paid for the describe
   * (bench:overload: the larger part of a refusal's time, and Temporal's CPU taken from the charges
   * it admitted), while all it can find is a charge another process started whose Try has not yet
   * run: decided charges all have their ledger row. Such a replay, refused, started nothing; sent
   * again it attaches once the Try has run or a place is free. docs/limits.md, Overload.
   */
  describeBudgetMs: 0,
} as const;

export class ChargeAdmission {
  /** Places taken, by workflow id: a request for a key already admitted here joins its place. */
  private readonly places = new Map<string, number>();
  private refusedCount = 0;
  /** The options' describeBudgetMs, or its default. */
  readonly describeBudgetMs: number;

  constructor(readonly options: ChargeAdmissionOptions) {
    if (!Number.isInteger(options.maxChargesInFlight) || options.maxChargesInFlight < 1) {
      throw new Error(`maxChargesInFlight must be a whole number of at least 1, got ${options.maxChargesInFlight}`);
    }
    this.describeBudgetMs = options.describeBudgetMs ?? admissionDefaults.describeBudgetMs;
    if (!Number.isInteger(this.describeBudgetMs) || this.describeBudgetMs < 0) {
      throw new Error(`describeBudgetMs must be a whole number of at least 0, got ${this.describeBudgetMs}`);
    }
  }

  /** Charges admitted and not yet released. */
  get chargesInFlight(): number {
    return this.places.size;
  }

  /** New charges refused since the process started. */
  get refused(): number {
    return this.refusedCount;
  }

  /**
   * A place for the charge of `workflowId`, or null when every place is taken. Requests for the
   * same key (duplicates arriving together) share one place, which is free again when the last of
   * them gives it back: they are one charge.
   */
  tryAcquire(workflowId: string): ReleaseSlot | null {
    const holders = this.places.get(workflowId);
    if (holders === undefined && this.places.size >= this.options.maxChargesInFlight) return null;
    this.places.set(workflowId, (holders ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.places.get(workflowId) ?? 1) - 1;
      if (left <= 0) this.places.delete(workflowId);
      else this.places.set(workflowId, left);
    };
  }

  /**
   * Whether a new charge under `workflowId` would find every place taken now: a key already
   * admitted here joins its place and is not refused. Takes nothing.
   */
  refusesNew(workflowId: string): boolean {
    return !this.places.has(workflowId) && this.places.size >= this.options.maxChargesInFlight;
  }

  /** The refusal of a new charge at a full process (503 overloaded with Retry-After), counted for /metrics. */
  refusal(): OverloadedError {
    this.refusedCount += 1;
    return new OverloadedError(
      this.options.retryAfterSeconds,
      `this process is deciding as many new charges as it can (${this.options.maxChargesInFlight} in flight); ` +
        'this request recorded and started nothing: retry with the same idempotency key after Retry-After seconds',
    );
  }
}
