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

/** Where the claim starts (migration 1763800000353): a transaction id, and the legacy seq range. */
export interface EventStreamCursor {
  /** xid8, as text: every event written by a transaction below it is acknowledged, and none can still appear there. */
  fromXact: string;
  /** The events from before the cursor existed not yet known acknowledged: seq in [legacyFromSeq, legacyToSeq). */
  legacyFromSeq: number;
  legacyToSeq: number;
}

/**
 * The events after the cursor whose values are $1 (from_xact), $2 and $3 (the legacy range): every
 * event not acknowledged yet is among them. Bound as parameters, not read in a subquery, so the
 * planner sees how few rows lie beyond the cursor and reads them through events_by_xact.
 */
const afterCursor = `(
    SELECT a.* FROM events a WHERE a.xact_id >= $1::xid8
    UNION ALL
    SELECT a.* FROM events a WHERE a.seq >= $2 AND a.seq < $3 AND a.xact_id IS NULL)`;

const cursorValues = (cursor: EventStreamCursor) => [cursor.fromXact, cursor.legacyFromSeq, cursor.legacyToSeq];

const unacknowledged = (alias: string) =>
  `NOT EXISTS (SELECT 1 FROM event_stream_publications p WHERE p.event_id = ${alias}.id AND p.published_at IS NOT NULL)`;

interface CursorRow {
  from_xact: string;
  legacy_from_seq: string | number;
  legacy_to_seq: string | number;
}

function cursorFromRow(row: CursorRow): EventStreamCursor {
  return { fromXact: row.from_xact, legacyFromSeq: Number(row.legacy_from_seq), legacyToSeq: Number(row.legacy_to_seq) };
}

/**
 * Moves the cursor up as far as is safe, and returns it: to the oldest unacknowledged event's
 * transaction, or the oldest running transaction, whichever is older (one statement, so one
 * snapshot answers both: an event not visible to it comes from a transaction at or above that
 * snapshot's xmin); the legacy seq cursor to its oldest unacknowledged event, or the end of its
 * range (those events all committed before the cursor existed). Never down.
 */
export async function advanceEventStreamCursor(pool: LedgerPool): Promise<EventStreamCursor> {
  const { rows } = await pool.query<CursorRow>(
    `UPDATE event_stream_cursor c SET
       from_xact = greatest(c.from_xact, least(
         pg_snapshot_xmin(pg_current_snapshot()),
         coalesce((SELECT e.xact_id FROM events e WHERE e.xact_id >= c.from_xact AND ${unacknowledged('e')} ORDER BY e.xact_id LIMIT 1),
                  pg_snapshot_xmin(pg_current_snapshot())))),
       legacy_from_seq = coalesce(
         (SELECT e.seq FROM events e WHERE e.seq >= c.legacy_from_seq AND e.seq < c.legacy_to_seq AND e.xact_id IS NULL AND ${unacknowledged('e')}
           ORDER BY e.seq LIMIT 1),
         c.legacy_to_seq)
     RETURNING c.from_xact::text AS from_xact, c.legacy_from_seq, c.legacy_to_seq`,
  );
  return cursorFromRow(rows[0]!);
}

async function readEventStreamCursor(pool: LedgerPool): Promise<EventStreamCursor> {
  const { rows } = await pool.query<CursorRow>('SELECT from_xact::text AS from_xact, legacy_from_seq, legacy_to_seq FROM event_stream_cursor');
  return cursorFromRow(rows[0]!);
}

/**
 * Up to `limit` events the stream has not had acknowledged, oldest first by seq, and marks a send
 * of each as started (attempts + 1) in the same statement. Events of one object come out in their
 * object_sequence order: the writers number one object's events under its row lock, so a later one
 * commits after, and has a larger seq than, the one before it. The cursor moves first, and only
 * the events after it are read: the cost follows the backlog, not the table.
 */
export async function claimUnpublishedEvents(pool: LedgerPool, limit: number): Promise<StreamEvent[]> {
  const cursor = await advanceEventStreamCursor(pool);
  const result = await pool.query<EventRow>(
    `WITH pending AS (
       SELECT e.* FROM ${afterCursor} e
        WHERE ${unacknowledged('e')}
        ORDER BY e.seq
        LIMIT $4
     ), started AS (
       INSERT INTO event_stream_publications (event_id)
       SELECT id FROM pending
       ON CONFLICT (event_id) DO UPDATE SET attempts = event_stream_publications.attempts + 1, last_sent_at = now()
     )
     SELECT seq, id, tenant, type, object_type, object_id, object_sequence, data, created_at FROM pending ORDER BY seq`,
    [...cursorValues(cursor), limit],
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
  const cursor = await readEventStreamCursor(pool);
  const result = await pool.query<{ unpublished: number; duplicates: number }>(
    `SELECT (SELECT count(*)::int FROM ${afterCursor} e WHERE ${unacknowledged('e')}) AS unpublished,
            (SELECT count(*)::int FROM event_stream_publications WHERE attempts > 1) AS duplicates`,
    cursorValues(cursor),
  );
  return { unpublished: result.rows[0]!.unpublished, possibleDuplicates: result.rows[0]!.duplicates };
}

/**
 * One publisher at a time: a session-level advisory lock on a connection the publisher keeps.
 * Two publishers would each send the same events (harmless, but every one a duplicate).
 */
export const eventStreamLockKey = 0x63670260;
