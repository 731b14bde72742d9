import { randomInt } from 'node:crypto';

/** Odds of the link's misbehaviours, each in [0, 1]. */
export interface FlakyLinkOdds {
  /** The call went through (the money may have moved) but the answer never reaches the agent. */
  dropResponseAfterCommit: number;
  /** The agent fires the same request several times at once (double click, parallel retries). */
  sendDuplicatesAtOnce: number;
}

export interface LinkCounters {
  requestsSent: number;
  responsesDropped: number;
  duplicateBursts: number;
}

export class ResponseDroppedError extends Error {
  override readonly name = 'ResponseDroppedError';
}

function chance(probability: number): boolean {
  return randomInt(1_000_000) < probability * 1_000_000;
}

/**
 * Stands between an agent and chargeguard and misbehaves the way real networks do: it lets the
 * request complete, then loses the answer; or it delivers several copies of one request at once.
 */
export class FlakyLink {
  readonly counters: LinkCounters = { requestsSent: 0, responsesDropped: 0, duplicateBursts: 0 };

  constructor(private readonly odds: FlakyLinkOdds) {}

  async send<T>(call: () => Promise<T>): Promise<T> {
    const copies = chance(this.odds.sendDuplicatesAtOnce) ? 2 + randomInt(3) : 1;
    if (copies > 1) this.counters.duplicateBursts++;
    this.counters.requestsSent += copies;
    const settled = await Promise.allSettled(Array.from({ length: copies }, call));
    const answered = settled.find((s): s is PromiseFulfilledResult<Awaited<T>> => s.status === 'fulfilled');
    if (!answered) throw (settled[0] as PromiseRejectedResult).reason;
    if (chance(this.odds.dropResponseAfterCommit)) {
      this.counters.responsesDropped++;
      throw new ResponseDroppedError('connection reset after the request was processed');
    }
    return answered.value;
  }
}
