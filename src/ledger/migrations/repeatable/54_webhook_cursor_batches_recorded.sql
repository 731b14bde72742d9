-- The record of cursor batches (docs/webhook-endpoints.md, How a delivery is made): for each batch
-- whose endpoint's cursor this owner still holds at the batch's start position, in one statement:
-- a delivery row per attempted event (delivered; pending a retry at p_retry_at after a failure;
-- failed for good when p_retry_at is null) with its first attempt row, and the cursor moved to the
-- batch's end. The cursor never passes an event without its row, nor a row exist without the cursor
-- past it. The lease is released whenever this owner holds it; a batch whose cursor moved meanwhile
-- (its lease expired and another process took it, or the endpoint was enabled again) records
-- nothing: its events are, or were, sent again from the cursor (at least once allows it).
--
-- Batches are parallel arrays (p_batch_*), one element per batch (one per endpoint); attempts are
-- parallel arrays (p_*), one element per attempted event. A batch whose attempts include a success
-- ends its endpoint's run of failures (failing_since), as webhook_deliveries_delivered does; what a
-- failure does to its endpoint (failing_since, disabling) is the caller's (recordAttempt's rule),
-- in the same transaction. Returns the endpoints whose batch was recorded.
--
-- Commits without waiting for the WAL flush (for this transaction only): a database crash that
-- loses the record loses the cursor's move with the rows, and the batch is sent again.

CREATE OR REPLACE FUNCTION webhook_cursor_batches_recorded(
  p_owner text,
  p_batch_endpoint_id text[], p_batch_from_xact xid8[], p_batch_from_seq bigint[], p_batch_to_xact xid8[], p_batch_to_seq bigint[],
  p_endpoint_id text[], p_event_id text[], p_started_at timestamptz[], p_duration_ms integer[], p_status_code integer[],
  p_error text[], p_delivered boolean[], p_retry_at timestamptz[]
) RETURNS TABLE (endpoint_id text) LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  RETURN QUERY
  WITH batch AS (
    SELECT b.endpoint_id, b.from_xact, b.from_seq, b.to_xact, b.to_seq,
           coalesce((SELECT bool_or(a.delivered) FROM unnest(p_endpoint_id, p_delivered) AS a (endpoint_id, delivered)
                      WHERE a.endpoint_id = b.endpoint_id), false) AS any_delivered
      FROM unnest(p_batch_endpoint_id, p_batch_from_xact, p_batch_from_seq, p_batch_to_xact, p_batch_to_seq)
           AS b (endpoint_id, from_xact, from_seq, to_xact, to_seq)),
  held AS (
    UPDATE webhook_endpoints e
       SET cursor_xact = b.to_xact, cursor_seq = b.to_seq,
           failing_since = CASE WHEN b.any_delivered THEN NULL ELSE e.failing_since END,
           cursor_owner = NULL, cursor_lease_expires_at = NULL, cursor_slots = 0
      FROM batch b
     WHERE e.id = b.endpoint_id AND e.cursor_owner = p_owner AND e.cursor_xact = b.from_xact AND e.cursor_seq = b.from_seq
    RETURNING e.id, e.tenant),
  attempted AS (
    SELECT a.*, held.tenant
      FROM unnest(p_endpoint_id, p_event_id, p_started_at, p_duration_ms, p_status_code, p_error, p_delivered, p_retry_at)
           AS a (endpoint_id, event_id, started_at, duration_ms, status_code, error, delivered, retry_at)
      JOIN held ON held.id = a.endpoint_id),
  made AS (
    INSERT INTO webhook_deliveries (endpoint_id, event_id, tenant, state, attempts, next_attempt_at, finished_at)
    SELECT a.endpoint_id, a.event_id, a.tenant,
           CASE WHEN a.delivered THEN 'delivered' WHEN a.retry_at IS NULL THEN 'failed' ELSE 'pending' END,
           1, coalesce(a.retry_at, now()),
           CASE WHEN a.delivered OR a.retry_at IS NULL THEN now() END
      FROM attempted a
    -- Never expected (a position is passed once), but a row already there must not stop the cursor.
    ON CONFLICT (endpoint_id, event_id) WHERE NOT requested DO NOTHING
    RETURNING id, endpoint_id, event_id),
  attempts AS (
    INSERT INTO webhook_delivery_attempts (delivery_id, endpoint_id, event_id, attempt, started_at, duration_ms, status_code, error, delivered)
    SELECT m.id, a.endpoint_id, a.event_id, 1, a.started_at, a.duration_ms, a.status_code, left(a.error, 500), a.delivered
      FROM made m JOIN attempted a ON a.endpoint_id = m.endpoint_id AND a.event_id = m.event_id)
  SELECT held.id FROM held;
  -- A batch whose cursor moved without it: its lease (and the slots it counts) ends now all the same.
  UPDATE webhook_endpoints e SET cursor_owner = NULL, cursor_lease_expires_at = NULL, cursor_slots = 0
   WHERE e.id = ANY (p_batch_endpoint_id) AND e.cursor_owner = p_owner;
END
$$;
