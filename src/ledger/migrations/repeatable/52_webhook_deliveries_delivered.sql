-- The record of successful attempts (a 2xx; docs/webhook-endpoints.md, How a delivery is made):
-- for each, its attempt row and its delivery moved to delivered, and the endpoint's run of failures
-- ended, in one statement and so one transaction: an attempt is never recorded without its delivery
-- moving on, nor the other way round. Several successes that finished close together are recorded
-- by one call (the arrays are parallel, one element per attempt). A success is recorded whoever
-- holds the lease now: the receiver has the event, and a second process's attempt only repeats it.
-- The endpoint row is written only when a run of failures was open (failing_since set), so a
-- success on a healthy endpoint leaves it untouched. Returns how many deliveries moved to delivered.
--
-- Commits without waiting for the WAL flush (for this transaction only): a database crash that
-- loses the record loses the attempt with its delivery's state, and the event is sent again, which
-- at least once allows.

CREATE OR REPLACE FUNCTION webhook_deliveries_delivered(
  p_delivery_id bigint[], p_endpoint_id text[], p_event_id text[], p_attempt integer[],
  p_started_at timestamptz[], p_duration_ms integer[], p_status_code integer[]
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  moved integer;
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  -- An endpoint deleted meanwhile took its deliveries with it: nothing to record for those (an
  -- attempt row is keyed by its delivery, whose deletion also deletes its attempts).
  INSERT INTO webhook_delivery_attempts (delivery_id, endpoint_id, event_id, attempt, started_at, duration_ms, status_code, error, delivered)
  SELECT o.delivery_id, o.endpoint_id, o.event_id, o.attempt, o.started_at, o.duration_ms, o.status_code, NULL, true
    FROM unnest(p_delivery_id, p_endpoint_id, p_event_id, p_attempt, p_started_at, p_duration_ms, p_status_code)
         AS o (delivery_id, endpoint_id, event_id, attempt, started_at, duration_ms, status_code)
   WHERE EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.id = o.delivery_id);
  UPDATE webhook_deliveries
     SET state = 'delivered', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL
   WHERE id = ANY (p_delivery_id) AND state = 'pending';
  GET DIAGNOSTICS moved = ROW_COUNT;
  UPDATE webhook_endpoints SET failing_since = NULL WHERE id = ANY (p_endpoint_id) AND failing_since IS NOT NULL;
  RETURN moved;
END
$$;
