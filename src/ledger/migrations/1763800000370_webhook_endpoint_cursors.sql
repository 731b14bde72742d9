-- Up Migration

-- First attempts of webhook deliveries come from the events log, read by a cursor per endpoint
-- (docs/webhook-endpoints.md, How a delivery is made), instead of a delivery row made by a trigger
-- in every event's own transaction. The fan-out cost each charge a plpgsql trigger, an endpoint
-- look-up and a delivery row per subscribed endpoint (a heap tuple and four index entries), and
-- each delivery two more statements to lease and record that row. A cursor is read and moved once
-- per batch of events; the rows of delivered events (and their attempts) are written then, in one
-- statement for the batch, so the tables and everything that reads them stay as they were.
--
-- Why a cursor can be trusted not to skip an event: it orders events by (xact_id, seq) and reads
-- only events whose writing transaction is below the oldest transaction still running
-- (pg_snapshot_xmin of the reader's snapshot). Each of those transactions has finished, so no
-- event can still appear at or below a position the cursor has reached; every transaction that can
-- still write an event has an id at or above that horizon (migration 353 explains the column).
-- A plain cursor over seq could skip one: a transaction with a smaller seq may commit after one
-- with a larger.
--
--   cursor_xact, cursor_seq   the position of the last event the endpoint's cursor passed: each
--                             event of the tenant up to it that the endpoint subscribes to has its
--                             delivery row (delivered, failed, or pending a retry)
--   cursor_from_seq           events with a seq at or below this are not the cursor's: written
--                             before the endpoint was created, before it was last enabled again, or
--                             before this migration (those have their fan-out rows already)
--   cursor_owner, cursor_lease_expires_at   the deliverer process that holds the cursor now (a
--                             batch in flight); another process takes it only once it expires
--   cursor_slots              how many of the endpoint's in-flight slots (WEBHOOK_ENDPOINT_CONCURRENCY)
--                             the cursor's batch uses while its lease is live: the retry lane's
--                             claim counts them as busy
--
-- Events written from now on must reach a cursor: the trigger goes under a lock that keeps events'
-- writers out, so every event committed before it has its fan-out rows and every later one has a
-- seq above the max read here (a writer waiting for the lock takes its seq after it).
LOCK TABLE events IN EXCLUSIVE MODE;

DROP TRIGGER events_fan_out_to_webhook_endpoints ON events;
DROP FUNCTION webhook_endpoints_fan_out();

-- cursor_from_seq relies on a seq taken after a read of max(seq) being above it: true while the
-- identity hands its values out one at a time (a session's cache of several could hand out a
-- smaller one later).
DO $$
BEGIN
  IF (SELECT seqcache FROM pg_sequence WHERE seqrelid = pg_get_serial_sequence('events', 'seq')::regclass) <> 1 THEN
    RAISE EXCEPTION 'events.seq must be cached one value at a time for the webhook cursors';
  END IF;
END
$$;

ALTER TABLE webhook_endpoints
  ADD COLUMN cursor_xact xid8,
  ADD COLUMN cursor_seq bigint,
  ADD COLUMN cursor_from_seq bigint,
  ADD COLUMN cursor_owner text,
  ADD COLUMN cursor_lease_expires_at timestamptz,
  ADD COLUMN cursor_slots integer NOT NULL DEFAULT 0 CHECK (cursor_slots >= 0);
UPDATE webhook_endpoints SET
  cursor_xact = pg_snapshot_xmin(pg_current_snapshot()),
  cursor_seq = 0,
  cursor_from_seq = (SELECT coalesce(max(seq), 0) FROM events);
-- A new endpoint starts at the current position: every transaction that can still write an event
-- has an id at or above the oldest running one. Its cursor_from_seq is set by its writer (the
-- largest seq committed then), which a default cannot read.
ALTER TABLE webhook_endpoints
  ALTER COLUMN cursor_xact SET NOT NULL,
  ALTER COLUMN cursor_xact SET DEFAULT pg_snapshot_xmin(pg_current_snapshot()),
  ALTER COLUMN cursor_seq SET NOT NULL,
  ALTER COLUMN cursor_seq SET DEFAULT 0,
  ALTER COLUMN cursor_from_seq SET NOT NULL,
  ADD CHECK ((cursor_owner IS NULL) = (cursor_lease_expires_at IS NULL));

-- A tenant's events in cursor order, from a position: what a cursor reads. Partial: events from
-- before migration 353 have no xact_id and are never a cursor's.
-- IF NOT EXISTS: the operator can build it first without holding writes, `CREATE INDEX
-- CONCURRENTLY events_by_tenant_xact ON events (tenant, xact_id, seq) WHERE xact_id IS NOT NULL;`.
CREATE INDEX IF NOT EXISTS events_by_tenant_xact ON events (tenant, xact_id, seq) WHERE xact_id IS NOT NULL;

-- Down Migration
DROP INDEX events_by_tenant_xact;
ALTER TABLE webhook_endpoints
  DROP COLUMN cursor_xact,
  DROP COLUMN cursor_seq,
  DROP COLUMN cursor_from_seq,
  DROP COLUMN cursor_owner,
  DROP COLUMN cursor_lease_expires_at,
  DROP COLUMN cursor_slots;
CREATE FUNCTION webhook_endpoints_fan_out() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO webhook_deliveries (endpoint_id, event_id, tenant)
  SELECT e.id, NEW.id, NEW.tenant
    FROM webhook_endpoints e
   WHERE e.tenant = NEW.tenant
     AND e.disabled_at IS NULL
     AND (NEW.type = ANY (e.enabled_events) OR '*' = ANY (e.enabled_events));
  RETURN NULL;
END
$$;
CREATE TRIGGER events_fan_out_to_webhook_endpoints AFTER INSERT ON events
  FOR EACH ROW EXECUTE FUNCTION webhook_endpoints_fan_out();
