import type { LedgerPool } from '../ledger/pool.js';
import { pruneFinishedDeliveries, type PrunedDeliveries } from '../ledger/webhook-endpoints.js';

/**
 * Retention of webhook deliveries (docs/webhook-endpoints.md, Retention). Without it every delivery
 * and every attempt would be kept for good: a table growing by (events x subscribed endpoints) rows
 * and their attempts, read by nothing once finished but an endpoint's recent attempts. It runs in
 * each process that runs a deliverer, on the deliverer's pool: the same processes that write these
 * rows' outcomes, and no workflow (a Temporal workflow for it would change the bundle the charges
 * run for a job that needs no durability: a run cut short is simply done by the next one).
 *
 * Events are not pruned: the events table is append-only, and GET /v1/events promises at least
 * 30 days of them.
 */
export interface DeliveryRetention {
  /** A delivery that finished (delivered, or failed for good) is deleted with its attempts this long after it finished, milliseconds. */
  deliveryRetentionMs: number;
  /** How often a pruning run starts, milliseconds (the first at start). */
  pruneIntervalMs: number;
  /** Deliveries one statement deletes at most (each statement is its own short transaction). */
  pruneBatchSize: number;
  /** Statements one run makes at most; what is left waits for the next run. */
  pruneBatchesPerRunMax: number;
}

/** Batches small enough that a statement holds its row locks for milliseconds, and 20 of them per run. */
export const deliveryPruneBatchDefaults = {
  pruneBatchSize: 1_000,
  pruneBatchesPerRunMax: 20,
} as const;

export interface PruneRun extends PrunedDeliveries {
  /** Statements made. */
  batches: number;
  /** True when the run stopped at pruneBatchesPerRunMax with a full last batch: more is due. */
  more: boolean;
}

export class DeliveryPruner {
  private running = false;
  private loop: Promise<void> | null = null;
  private wake: (() => void) | null = null;

  constructor(
    private readonly pool: LedgerPool,
    private readonly retention: DeliveryRetention,
    private readonly options: { log?: (line: string) => void; onRun?: (run: PruneRun) => void } = {},
  ) {
    for (const [name, value] of Object.entries(retention)) {
      if (!Number.isSafeInteger(value) || value <= 0) throw new Error(`delivery retention: ${name} must be a positive integer (got ${value})`);
    }
  }

  /** One run: full batches until a short one, at most pruneBatchesPerRunMax of them. */
  async runOnce(): Promise<PruneRun> {
    const run: PruneRun = { deliveries: 0, attempts: 0, batches: 0, more: false };
    const { deliveryRetentionMs, pruneBatchSize, pruneBatchesPerRunMax } = this.retention;
    while (run.batches < pruneBatchesPerRunMax) {
      const pruned = await pruneFinishedDeliveries(this.pool, { retentionMs: deliveryRetentionMs, batchSize: pruneBatchSize });
      run.batches += 1;
      run.deliveries += pruned.deliveries;
      run.attempts += pruned.attempts;
      run.more = pruned.deliveries === pruneBatchSize;
      if (!run.more) break;
    }
    return run;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  /** Stops after the statement in flight, if any. */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
  }

  private async run(): Promise<void> {
    while (this.running) {
      try {
        const run = await this.runOnce();
        if (run.deliveries > 0) this.log(`webhook deliveries pruned: ${run.deliveries} deliveries and ${run.attempts} attempts finished over ${this.retention.deliveryRetentionMs} ms ago`);
        this.options.onRun?.(run);
      } catch (error) {
        // The database away, say: the next run tries again, and nothing was half done (one statement each).
        this.log(`pruning webhook deliveries failed (${(error as Error).message}); again in ${this.retention.pruneIntervalMs} ms`);
      }
      if (!this.running) break;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, this.retention.pruneIntervalMs);
        const self = this;
        function done() {
          clearTimeout(timer);
          self.wake = null;
          resolve();
        }
        this.wake = done;
      });
    }
  }

  private log(line: string): void {
    (this.options.log ?? ((text: string) => process.stderr.write(`${text}\n`)))(line);
  }
}
