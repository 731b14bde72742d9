import { setTimeout as delay } from 'node:timers/promises';

/**
 * Keeps one process the stack owns running: when it exits without being asked to, it is started
 * again after a bounded, growing delay, and every exit and restart is said on the log. A process
 * that keeps dying soon after it starts (a crash loop: a wrong setting, a port someone else took)
 * is given up on after a bounded number of tries, so the owner can stop in order and say why,
 * instead of restarting it for ever.
 */

/** One incarnation of a supervised process. */
export interface SupervisedRun {
  /** Operating system pid, for messages. */
  pid: number;
  /** Resolves when this incarnation exits, whoever made it. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Stops this incarnation (it is not restarted: the supervisor knows it asked). */
  stop(): Promise<void>;
}

export interface SupervisorLimits {
  /** Delay before the first restart after a run that was stable. */
  initialDelayMs: number;
  /** Ceiling of the delay, which doubles with each further failure in a row. */
  maxDelayMs: number;
  /** A run that lasted this long was stable: the next exit starts the backoff from the initial delay again. */
  stableAfterMs: number;
  /** Failures in a row (exits before stableAfterMs, or starts that failed) after which the supervisor gives up. */
  maxFailuresInARow: number;
}

/**
 * 100 ms first: a process that was SIGKILLed is back as soon as it can start, which is what the
 * recovery target (3 s after a single fault) needs. Doubling to 10 s, 8 failures in a row before
 * giving up: 12.7 s of delays between the 8 tries, plus the tries themselves.
 */
export const defaultSupervisorLimits: SupervisorLimits = {
  initialDelayMs: 100,
  maxDelayMs: 10_000,
  stableAfterMs: 30_000,
  maxFailuresInARow: 8,
};

export interface SupervisorOptions<R extends SupervisedRun> {
  /** `worker-1`, `temporal`, …: how messages name it. */
  name: string;
  /** Starts one incarnation; resolves once it is ready, rejects (having cleaned up) when it could not. */
  start: () => Promise<R>;
  limits?: SupervisorLimits;
  /** Where exits and restarts are said (stderr for `start --cluster`). */
  log: (line: string) => void;
  /** Called with each incarnation once it is ready, the first one included. */
  onReady?: (run: R) => void;
}

export class GaveUpError extends Error {}

export class Supervisor<R extends SupervisedRun> {
  private run: R | null = null;
  private stopping = false;
  private readonly stopped = new AbortController();
  private readonly limits: SupervisorLimits;
  private failuresInARow = 0;
  private restartCount = 0;
  private loop: Promise<void> | null = null;
  private giveUp!: (error: GaveUpError) => void;
  /** Rejects when the supervisor gives up on a crash loop; never settles otherwise. */
  readonly gaveUp: Promise<never>;

  constructor(private readonly options: SupervisorOptions<R>) {
    this.limits = options.limits ?? defaultSupervisorLimits;
    this.gaveUp = new Promise<never>((_, reject) => {
      this.giveUp = reject;
    });
    // Observed by whoever waits on it; not an unhandled rejection meanwhile.
    this.gaveUp.catch(() => undefined);
  }

  get name(): string {
    return this.options.name;
  }

  /** The incarnation running now; null between an exit and the restart. */
  get current(): R | null {
    return this.run;
  }

  /** Restarts so far. */
  get restarts(): number {
    return this.restartCount;
  }

  /** Starts the first incarnation (its failure is the caller's: nothing is retried) and supervises from then on. */
  async start(): Promise<R> {
    const run = await this.options.start();
    this.adopt(run);
    this.loop = this.supervise(run);
    return run;
  }

  /** Stops supervising and stops the incarnation running now, if any. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.stopped.abort();
    const run = this.run;
    if (run !== null) await run.stop();
    await this.loop;
  }

  private adopt(run: R): void {
    this.run = run;
    this.options.onReady?.(run);
  }

  private async supervise(first: R): Promise<void> {
    let run: R | null = first;
    let startedAtMs = Date.now();
    for (;;) {
      if (run !== null) {
        const { code, signal } = await run.exited;
        this.run = null;
        if (this.stopping) return;
        const ranMs = Date.now() - startedAtMs;
        this.failuresInARow = ranMs >= this.limits.stableAfterMs ? 1 : this.failuresInARow + 1;
        const how = signal === null ? `code ${code ?? 'null'}` : `signal ${signal}`;
        if (!this.next(`${this.name} (pid ${run.pid}) exited (${how}) after ${ranMs} ms`)) return;
      }
      const delayMs = this.delayMs();
      this.options.log(`${this.name}: restart ${this.restartCount + 1} in ${delayMs} ms`);
      const waited = await delay(delayMs, true, { signal: this.stopped.signal }).catch(() => false);
      if (!waited || this.stopping) return;
      this.restartCount += 1;
      startedAtMs = Date.now();
      try {
        run = await this.options.start();
      } catch (error) {
        run = null;
        this.failuresInARow += 1;
        if (!this.next(`${this.name}: restart ${this.restartCount} failed: ${(error as Error).message.split('\n')[0]}`)) return;
        continue;
      }
      // Asked to stop while it was starting: it is not wanted any more.
      if (this.stopping) {
        await run.stop();
        return;
      }
      this.adopt(run);
      this.options.log(`${this.name}: restarted (pid ${run.pid}) ${Date.now() - startedAtMs} ms after the attempt began`);
    }
  }

  /** Logs what happened; false (having given up) when the failures in a row reached the limit. */
  private next(what: string): boolean {
    if (this.failuresInARow >= this.limits.maxFailuresInARow) {
      const message = `${what}; giving up on ${this.name} after ${this.failuresInARow} failures in a row (each within ${this.limits.stableAfterMs} ms of its start)`;
      this.options.log(message);
      this.giveUp(new GaveUpError(message));
      return false;
    }
    this.options.log(what);
    return true;
  }

  private delayMs(): number {
    return Math.min(this.limits.maxDelayMs, this.limits.initialDelayMs * 2 ** Math.max(0, this.failuresInARow - 1));
  }
}
