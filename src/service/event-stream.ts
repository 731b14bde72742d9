import type pg from 'pg';
import { claimUnpublishedEvents, eventStreamLockKey, eventStreamStatus, markEventsPublished, type EventStreamStatus, type StreamEvent } from '../ledger/event-stream.js';
import type { LedgerPool } from '../ledger/pool.js';

export type { EventStreamStatus, StreamEvent };

/**
 * What the event stream's publisher (src/queue/event-stream.ts) asks of the ledger: the events not
 * yet acknowledged, the acknowledgement, and the one-publisher lock. The SQL is the ledger's.
 */
export class EventStreamSource {
  private lockClient: pg.PoolClient | null = null;

  constructor(private readonly ledger: LedgerPool) {}

  /** Takes the publisher lock if free; true when this process now publishes. Kept until release(). */
  async tryLock(): Promise<boolean> {
    if (this.lockClient !== null) return true;
    const client = await this.ledger.connect();
    try {
      const result = await client.query<{ locked: boolean }>('SELECT pg_try_advisory_lock($1) AS locked', [eventStreamLockKey]);
      if (result.rows[0]?.locked === true) {
        this.lockClient = client;
        return true;
      }
      client.release();
      return false;
    } catch (error) {
      client.release(error as Error);
      throw error;
    }
  }

  /** Lets another process publish (closing the connection releases the session lock for sure). */
  async release(): Promise<void> {
    const client = this.lockClient;
    this.lockClient = null;
    client?.release(true);
  }

  claim(limit: number): Promise<StreamEvent[]> {
    return claimUnpublishedEvents(this.ledger, limit);
  }

  markPublished(eventIds: string[]): Promise<void> {
    return markEventsPublished(this.ledger, eventIds);
  }

  status(): Promise<EventStreamStatus> {
    return eventStreamStatus(this.ledger);
  }
}
