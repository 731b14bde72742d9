import type { LedgerPool } from '../ledger/pool.js';
import { recordDelivered, type DeliveredAttempt } from '../ledger/webhook-endpoints.js';

/** Successes recorded by one statement at most (the attempts in flight bound it first). */
export const deliveredBatchMax = 64;

/**
 * Records the deliverer's successful attempts, several per statement when they finish close
 * together: the first success is written at once, and those that finish while a statement is in
 * flight wait for it and go together in the next one. No success waits for a timer, so recording
 * never adds delay on a quiet endpoint; under load a burst of 2xx answers costs one round trip
 * instead of one each. A statement that fails fails all of its attempts (none is recorded), and each
 * delivery's lease expires and is claimed again, as for any attempt whose record is lost.
 */
export class DeliveredRecorder {
  private queue: Array<{ attempt: DeliveredAttempt; settle: (error?: unknown) => void }> = [];
  private flushing = false;

  constructor(private readonly pool: LedgerPool) {}

  record(attempt: DeliveredAttempt): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ attempt, settle: (error) => (error === undefined ? resolve() : reject(error as Error)) });
      if (!this.flushing) void this.flush();
    });
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
