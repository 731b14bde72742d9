import type pg from 'pg';

/**
 * The pool whose steps are batched: pg's Pool, named here rather than imported from ./pool.js,
 * which imports this module to set a new pool's limits (the two would import each other).
 */
type LedgerPool = pg.Pool;

/**
 * Group commit for the ledger's steps. A busy ledger spends most of a Try or Confirm on what every
 * transaction pays once: the round trip, the statement's start, the commit's WAL flush. So a pool
 * runs at most `maxInFlight` calls of one step at a time; the calls that arrive meanwhile wait and
 * go together, up to `maxBatchSize`, in one call of the step's batch function (one transaction)
 * as soon as a slot frees. Nothing waits on a timer: an idle ledger sends each call at once, alone,
 * through the single-step function, exactly as without batching; batches form only when calls
 * already queue, so they cost no latency that queueing did not.
 *
 * Each item of a batch is the single-step function itself, so its answer is the one it would get
 * alone. A batch is all or nothing: when it fails (one item's refusal, a deadlock, a timeout, a
 * lost connection) nothing of it happened (or, if the connection was lost after the commit, all of
 * it did: every step is idempotent), and each of its items runs again alone, to get its own answer
 * or its own error. A row the batch did not return for an item (which would be a bug) sends that
 * item alone too.
 */
export interface StepBatchLimits {
  /** Calls of one step (Try, Confirm) a pool runs at once; the rest wait for the next batch. */
  maxInFlight: number;
  /** Charges in one batch; the batch functions refuse more than 64. 1 turns batching off. */
  maxBatchSize: number;
}

export const defaultStepBatchLimits: StepBatchLimits = { maxInFlight: 4, maxBatchSize: 32 };

const batchFunctionLimit = 64;
const limitsByPool = new WeakMap<LedgerPool, StepBatchLimits>();

/** Sets the pool's batching limits (default `defaultStepBatchLimits`). */
export function setStepBatchLimits(pool: LedgerPool, limits: StepBatchLimits): void {
  if (!Number.isInteger(limits.maxInFlight) || limits.maxInFlight < 1) {
    throw new RangeError(`maxInFlight must be a positive integer, not ${limits.maxInFlight}`);
  }
  if (!Number.isInteger(limits.maxBatchSize) || limits.maxBatchSize < 1 || limits.maxBatchSize > batchFunctionLimit) {
    throw new RangeError(`maxBatchSize must be an integer in 1..${batchFunctionLimit}, not ${limits.maxBatchSize}`);
  }
  limitsByPool.set(pool, { ...limits });
}

export function stepBatchLimits(pool: LedgerPool): StepBatchLimits {
  return limitsByPool.get(pool) ?? defaultStepBatchLimits;
}

interface Waiting<Item, Result> {
  item: Item;
  resolve: (result: Result) => void;
  reject: (error: unknown) => void;
}

/** How one step runs: alone, or as a batch whose results are matched back to items by key. */
export interface StepRunner<Item, Result> {
  keyOf(item: Item): string;
  /** False for an item that must run alone (it takes locks whose order a batch cannot keep). */
  mayBatch(item: Item): boolean;
  runOne(item: Item): Promise<Result>;
  /** Results keyed by `keyOf`; rejects when the batch did not happen. */
  runMany(items: Item[]): Promise<Map<string, Result>>;
}

/** What a step's batcher has done since the pool was made: for metrics, tests and benchmarks. */
export interface StepBatchCounts {
  /** Batch calls that committed. */
  batches: number;
  /** Items answered by a committed batch. */
  batchedItems: number;
  /** Batch calls that failed, whose items then ran alone. */
  failedBatches: number;
  /** Items sent alone (no company in the queue, a failed batch, or no row for the item). */
  singleItems: number;
}

export class StepBatcher<Item, Result> {
  private readonly waiting: Waiting<Item, Result>[] = [];
  private inFlight = 0;
  readonly counts: StepBatchCounts = { batches: 0, batchedItems: 0, failedBatches: 0, singleItems: 0 };

  constructor(
    private readonly pool: LedgerPool,
    private readonly runner: StepRunner<Item, Result>,
  ) {}

  /** Calls waiting for a slot and batch calls running now: read-only, for benchmarks that sample the queue. */
  depth(): { waiting: number; inFlight: number } {
    return { waiting: this.waiting.length, inFlight: this.inFlight };
  }

  submit(item: Item): Promise<Result> {
    if (!this.runner.mayBatch(item)) {
      this.counts.singleItems += 1;
      return this.runner.runOne(item);
    }
    return new Promise<Result>((resolve, reject) => {
      this.waiting.push({ item, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    const { maxInFlight, maxBatchSize } = stepBatchLimits(this.pool);
    while (this.inFlight < maxInFlight && this.waiting.length > 0) {
      const batch = this.waiting.splice(0, maxBatchSize);
      this.inFlight += 1;
      void this.run(batch).finally(() => {
        this.inFlight -= 1;
        this.pump();
      });
    }
  }

  /** Settles every item of the batch; never rejects. */
  private async run(batch: Waiting<Item, Result>[]): Promise<void> {
    let alone = batch;
    if (batch.length > 1) {
      const results = await this.runner.runMany(batch.map((waiting) => waiting.item)).catch(() => null);
      if (results === null) this.counts.failedBatches += 1;
      else {
        this.counts.batches += 1;
        alone = [];
        for (const waiting of batch) {
          const result = results.get(this.runner.keyOf(waiting.item));
          if (result === undefined) alone.push(waiting);
          else {
            this.counts.batchedItems += 1;
            waiting.resolve(result);
          }
        }
      }
    }
    this.counts.singleItems += alone.length;
    await Promise.all(alone.map((waiting) => this.runner.runOne(waiting.item).then(waiting.resolve, waiting.reject)));
  }
}

const batchersByPool = new WeakMap<LedgerPool, Map<string, StepBatcher<unknown, unknown>>>();

/** The counts of the pool's batcher for `step` (zeros before its first call). */
export function stepBatchCounts(pool: LedgerPool, step: 'try' | 'confirm'): StepBatchCounts {
  const batcher = batchersByPool.get(pool)?.get(step);
  return { ...(batcher?.counts ?? { batches: 0, batchedItems: 0, failedBatches: 0, singleItems: 0 }) };
}

/** How deep the pool's batcher for `step` is right now (zeros before its first call). */
export function stepBatchDepth(pool: LedgerPool, step: 'try' | 'confirm'): { waiting: number; inFlight: number } {
  return batchersByPool.get(pool)?.get(step)?.depth() ?? { waiting: 0, inFlight: 0 };
}

/** The pool's batcher for one step (one per pool and step name). */
export function stepBatcher<Item, Result>(pool: LedgerPool, step: string, runner: StepRunner<Item, Result>): StepBatcher<Item, Result> {
  let batchers = batchersByPool.get(pool);
  if (batchers === undefined) {
    batchers = new Map();
    batchersByPool.set(pool, batchers);
  }
  let batcher = batchers.get(step) as StepBatcher<Item, Result> | undefined;
  if (batcher === undefined) {
    batcher = new StepBatcher(pool, runner);
    batchers.set(step, batcher as StepBatcher<unknown, unknown>);
  }
  return batcher;
}
