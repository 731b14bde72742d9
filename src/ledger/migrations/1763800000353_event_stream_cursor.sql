-- Up Migration

-- The event stream's claim (src/ledger/event-stream.ts) asked "which events has the broker not
-- acknowledged?" by walking events from the oldest and probing event_stream_publications for each:
-- every poll read every event ever written. It now reads only the events after a cursor, and the
-- cursor is one that a late commit cannot pass.
--
-- Why not a cursor over seq: seq is taken when a row is inserted, and a transaction with a smaller
-- seq may commit after one with a larger seq; a seq cursor moved past the larger one would skip the
-- smaller one for good. What orders the commits that are still possible is the transaction id:
--
--   xact_id   the id of the transaction that wrote the event (pg_current_xact_id(), 64 bits, never
--             wraps). Every transaction that can still commit an event (running now, or not yet
--             begun) has an id at or above the oldest running one, pg_snapshot_xmin of a snapshot.
--
-- So the cursor `from_xact` may move up to the smaller of that horizon and the oldest xact_id among
-- the visible events not yet acknowledged: every event below it is then acknowledged, and none can
-- appear below it later. The claim reads events with xact_id >= from_xact through events_by_xact,
-- and sorts those by seq as before (one object's events still come out in their order). Its cost is
-- the events written since the oldest unacknowledged one or the oldest running transaction,
-- whichever is older, instead of the whole table.
--
-- Events written before this migration have no xact_id (the column is added without a rewrite of
-- the table): they all lie in [legacy_from_seq, legacy_to_seq), committed before this migration (it
-- holds events' ACCESS EXCLUSIVE lock), so a plain seq cursor is safe over them; it reaches
-- legacy_to_seq once all of them are acknowledged, and from then on that range is empty.
ALTER TABLE events ADD COLUMN xact_id xid8;
ALTER TABLE events ALTER COLUMN xact_id SET DEFAULT pg_current_xact_id();
-- Rows from now on carry it (the legacy rows are not checked: NOT VALID).
ALTER TABLE events ADD CONSTRAINT events_xact_id_written CHECK (xact_id IS NOT NULL) NOT VALID;
-- Partial: the legacy rows (null) stay out of it, so building it on an existing ledger writes nothing for them.
-- IF NOT EXISTS: the operator can build it first without holding writes, `CREATE INDEX CONCURRENTLY
-- events_by_xact ON events (xact_id) WHERE xact_id IS NOT NULL;` (after the column exists).
CREATE INDEX IF NOT EXISTS events_by_xact ON events (xact_id) WHERE xact_id IS NOT NULL;

-- One row: where the claim starts.
CREATE TABLE event_stream_cursor (
  one              boolean PRIMARY KEY DEFAULT true CHECK (one),
  from_xact        xid8    NOT NULL,
  legacy_from_seq  bigint  NOT NULL,
  legacy_to_seq    bigint  NOT NULL,
  CHECK (legacy_from_seq <= legacy_to_seq)
);
-- The oldest running transaction's id: any transaction that inserts an event after this migration
-- (one waiting for events' lock now included) has an id at or above it.
INSERT INTO event_stream_cursor (from_xact, legacy_from_seq, legacy_to_seq)
SELECT pg_snapshot_xmin(pg_current_snapshot()), coalesce(min(seq), 0), coalesce(max(seq) + 1, 0) FROM events;

-- Down Migration
DROP TABLE event_stream_cursor;
DROP INDEX events_by_xact;
ALTER TABLE events DROP CONSTRAINT events_xact_id_written;
ALTER TABLE events DROP COLUMN xact_id;
