import type { LedgerPool } from './pool.js';

/** One event as the stream publishes it: its id is the consumer's deduplication key. */
export interface StreamEvent {
  seq: number;
  id: string;
  tenant: string;
  type: string;
  objectType: string;
  objectId: string;
  objectSequence: number;
  data: Record<string, unknown>;
  createdAt: string;
}

interface EventRow {
  seq: string | number;
  id: string;
  tenant: string;
  type: string;
  object_type: string;
  object_id: string;
  object_sequence: number;
  data: Record<string, unknown>;
  created_at: Date;
}

/**
 * Up to `limit` events the stream has not had acknowledged, oldest first by seq, and marks a send
 * of each as started (attempts + 1) in the same statement. Events of one object come out in their
 * object_sequence order: the writers number one object's events under its row lock, so a later one
 * commits after, and has a larger seq than, the one before it.
 */
export async function claimUnpublishedEvents(pool: LedgerPool, limit: number): Promise<StreamEvent[]> {
  const result = await pool.query<EventRow>(
    `WITH pending AS (
       SELECT e.* FROM events e
        WHERE NOT EXISTS (SELECT 1 FROM event_stream_publications p WHERE p.event_id = e.id AND p.published_at IS NOT NULL)
        ORDER BY e.seq
        LIMIT $1
     ), started AS (
       INSERT INTO event_stream_publications (event_id)
       SELECT id FROM pending
       ON CONFLICT (event_id) DO UPDATE SET attempts = event_stream_publications.attempts + 1, last_sent_at = now()
     )
     SELECT seq, id, tenant, type, object_type, object_id, object_sequence, data, created_at FROM pending ORDER BY seq`,
    [limit],
  );
  return result.rows.map((row) => ({
    seq: Number(row.seq),
    id: row.id,
    tenant: row.tenant,
    type: row.type,
    objectType: row.object_type,
    objectId: row.object_id,
    objectSequence: row.object_sequence,
    data: row.data,
    createdAt: row.created_at.toISOString(),
  }));
}

/** Records the broker's acknowledgement of these events. */
export async function markEventsPublished(pool: LedgerPool, eventIds: string[]): Promise<void> {
  if (eventIds.length === 0) return;
  await pool.query('UPDATE event_stream_publications SET published_at = now() WHERE event_id = ANY($1::text[]) AND published_at IS NULL', [eventIds]);
}

export interface EventStreamStatus {
  /** Events not acknowledged by the broker yet. */
  unpublished: number;
  /** Events sent more than once: possibly twice on the stream (consumers drop them by event id). */
  possibleDuplicates: number;
}

export async function eventStreamStatus(pool: LedgerPool): Promise<EventStreamStatus> {
  const result = await pool.query<{ unpublished: number; duplicates: number }>(
    `SELECT (SELECT count(*)::int FROM events e
              WHERE NOT EXISTS (SELECT 1 FROM event_stream_publications p WHERE p.event_id = e.id AND p.published_at IS NOT NULL)) AS unpublished,
            (SELECT count(*)::int FROM event_stream_publications WHERE attempts > 1) AS duplicates`,
  );
  return { unpublished: result.rows[0]!.unpublished, possibleDuplicates: result.rows[0]!.duplicates };
}

/**
 * One publisher at a time: a session-level advisory lock on a connection the publisher keeps.
 * Two publishers would each send the same events (harmless, but every one a duplicate).
 */
export const eventStreamLockKey = 0x63670260;
