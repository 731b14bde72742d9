import type { LedgerPool } from '../ledger/pool.js';
import { recordDelivered, type DeliveredAttempt } from '../ledger/webhook-endpoints.js';

/** Successes recorded by one statement at most (the attempts in flight bound it first). */
export const deliveredBatchMax = 64;

/**
 * Records the deliverer's successful attempts, several per statement when they finish close
 * together. A success is written at once when none of the deliverer's other requests is still being
 * sent, so recording never adds delay on a quiet endpoint. While some are, it waits for them to end
 * (the requests of one claim are sent together and answer together), or `holdMs` at most, and they
 * all go in one statement; those that finish while a statement is in flight go in the next one. A
 * success only waits to be recorded: the receiver already has it, and the delivery's lease (so its
 * endpoint's slot) is held a few milliseconds longer. A statement that fails fails all of its
 * attempts (none is recorded), and each delivery's lease expires and is claimed again, as for any
 * attempt whose record is lost.
 *
 * While `carried()` says so (the deliverer is running and claims again within its coalescing
 * window), successes are not written here at all: the deliverer takes them (takeWaiting) into its
 * next claim, which records them in the claim's own transaction (webhook_deliveries_delivered_then_claim).
 */
export class DeliveredRecorder {
  private queue: Array<{ attempt: DeliveredAttempt; settle: (error?: unknown) => void }> = [];
  private flushing = false;
  private holdTimer: NodeJS.Timeout | undefined;

  /**
   * @param sending how many of the deliverer's requests are being sent now (not yet answered)
   * @param holdMs the longest a success waits for the others' answers before it is written, milliseconds
   * @param carried whether the next claim will take the waiting successes (takeWaiting) instead
   */
  constructor(
    private readonly pool: LedgerPool,
    private readonly sending: () => number = () => 0,
    private readonly holdMs = 0,
    private readonly carried: () => boolean = () => false,
  ) {}

  /** Successes waiting to be recorded, not yet in a statement. */
  waiting(): number {
    return this.queue.length;
  }

  /**
   * The waiting successes (deliveredBatchMax at most), for the caller to record in a statement of its
   * own; `settle` with that statement's outcome (an error fails them all).
   */
  takeWaiting(): { attempts: DeliveredAttempt[]; settle: (error?: unknown) => void } {
    const batch = this.queue.splice(0, deliveredBatchMax);
    if (this.queue.length === 0) {
      clearTimeout(this.holdTimer);
      this.holdTimer = undefined;
    }
    return {
      attempts: batch.map((item) => item.attempt),
      settle: (error) => {
        for (const item of batch) item.settle(error === undefined ? undefined : (error ?? new Error('recording delivered attempts failed')));
      },
    };
  }

  record(attempt: DeliveredAttempt): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ attempt, settle: (error) => (error === undefined ? resolve() : reject(error as Error)) });
      this.nudge();
    });
  }

  /** Says that a request has been answered (or failed): the waiting successes go now if it was the last being sent. */
  nudge(): void {
    if (this.flushing || this.queue.length === 0 || this.carried()) return;
    if (this.sending() === 0 || this.holdMs <= 0 || this.queue.length >= deliveredBatchMax) {
      clearTimeout(this.holdTimer);
      this.holdTimer = undefined;
      void this.flush();
    } else if (this.holdTimer === undefined) {
      this.holdTimer = setTimeout(() => {
        this.holdTimer = undefined;
        if (!this.flushing) void this.flush();
      }, this.holdMs);
    }
  }

  private async flush(): Promise<void> {
    this.flushing = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, deliveredBatchMax);
        try {
          await recordDelivered(this.pool, batch.map((item) => item.attempt));
          for (const item of batch) item.settle();
        } catch (error) {
          for (const item of batch) item.settle(error ?? new Error('recording delivered attempts failed'));
        }
      }
    } finally {
      this.flushing = false;
    }
  }
}
