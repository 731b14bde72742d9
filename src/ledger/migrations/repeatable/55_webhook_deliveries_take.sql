-- The deliverer's one round trip (docs/webhook-endpoints.md, How a delivery is made), in one
-- transaction: record what it carries, then take new work for up to p_max slots.
--
--   1. the retry lane's successes (webhook_deliveries_delivered) and the finished cursor batches
--      (webhook_cursor_batches_recorded), so the slots they held are free for this very call;
--   2. the retry lane: due delivery rows (webhook_deliveries_claim, which takes the claims'
--      advisory lock, held to the end of this transaction);
--   3. the cursor lane: for enabled endpoints whose cursor lease is free (never one whose batch is
--      still in flight, whoever holds it), the lease, and the next events after the cursor: at most
--      p_batch_events_max events of the tenant in (xact_id, seq) order, all from transactions below
--      the oldest one still running (pg_snapshot_xmin), so none can still appear before them. Those
--      the endpoint subscribes to come back, one row each; a batch with none moves the cursor past
--      them here and now. The batch may use min(free slots, the process's slots left) of the
--      endpoint's p_per_endpoint_max, free being those that no live retry lease holds; it records
--      them on the endpoint row (cursor_slots), where the retry lane's claim counts them busy.
--
-- Rows: lane 'retry' (id is the delivery row, attempts its attempt number) or 'cursor' (id null,
-- attempt 1; event_xact and the batch's start, end and slots to record it by). Every row carries
-- what its attempt needs: URL, event, and the endpoint's live secrets, newest first.
--
-- Commits without waiting for the WAL flush (for this transaction only): what a crash loses is a
-- lease, which expires, or a record, whose events are sent again.

CREATE OR REPLACE FUNCTION webhook_deliveries_take(
  p_delivery_id bigint[], p_endpoint_id text[], p_event_id text[], p_attempt integer[],
  p_started_at timestamptz[], p_duration_ms integer[], p_status_code integer[],
  p_batch_endpoint_id text[], p_batch_from_xact xid8[], p_batch_from_seq bigint[], p_batch_to_xact xid8[], p_batch_to_seq bigint[],
  p_sent_endpoint_id text[], p_sent_event_id text[], p_sent_started_at timestamptz[], p_sent_duration_ms integer[], p_sent_status_code integer[],
  p_owner text, p_lease_ms integer, p_per_endpoint_max integer, p_max integer, p_tenants text[], p_batch_events_max integer
) RETURNS TABLE (
  lane text, id bigint, endpoint_id text, tenant text, url text, attempts integer, created_at timestamptz,
  event_seq bigint, event_id text, event_type text, event_object_type text, event_object_id text,
  event_object_sequence integer, event_data jsonb, event_created_at timestamptz, secrets text[],
  event_xact text, batch_from_xact text, batch_from_seq bigint, batch_to_xact text, batch_to_seq bigint, batch_slots integer
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
  taken integer;
  room integer;
  horizon xid8;
  candidate record;
  free integer;
  last_xact xid8;
  last_seq bigint;
  subscribed integer;
  slots integer;
  live_secrets text[];
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  IF cardinality(p_delivery_id) > 0 THEN
    PERFORM webhook_deliveries_delivered(p_delivery_id, p_endpoint_id, p_event_id, p_attempt, p_started_at, p_duration_ms, p_status_code);
  END IF;
  IF cardinality(p_batch_endpoint_id) > 0 THEN
    -- Successes only: a batch with a failure is recorded in a transaction of its own, with the
    -- failure's consequences for its endpoint.
    PERFORM webhook_cursor_batches_recorded(
      p_owner, p_batch_endpoint_id, p_batch_from_xact, p_batch_from_seq, p_batch_to_xact, p_batch_to_seq,
      p_sent_endpoint_id, p_sent_event_id, p_sent_started_at, p_sent_duration_ms, p_sent_status_code,
      array_fill(NULL::text, ARRAY[cardinality(p_sent_event_id)]), array_fill(true, ARRAY[cardinality(p_sent_event_id)]),
      array_fill(NULL::timestamptz, ARRAY[cardinality(p_sent_event_id)]));
  END IF;
  IF p_max <= 0 THEN
    RETURN;
  END IF;

  RETURN QUERY
  SELECT 'retry', c.id, c.endpoint_id, c.tenant, c.url, c.attempts, c.created_at,
         c.event_seq, c.event_id, c.event_type, c.event_object_type, c.event_object_id,
         c.event_object_sequence, c.event_data, c.event_created_at, c.secrets,
         NULL::text, NULL::text, NULL::bigint, NULL::text, NULL::bigint, NULL::integer
    FROM webhook_deliveries_claim(p_owner, p_lease_ms, p_per_endpoint_max, p_max, p_tenants) c;
  GET DIAGNOSTICS taken = ROW_COUNT;
  room := p_max - taken;
  IF room <= 0 THEN
    RETURN;
  END IF;
  -- The claims' lock is held (the retry claim took it): cursor leases and their slots are decided
  -- one process at a time, as retry leases are.
  PERFORM pg_advisory_xact_lock(hashtextextended('webhook_deliveries:claim', 0));

  horizon := pg_snapshot_xmin(pg_current_snapshot());
  FOR candidate IN
    SELECT e.id, e.tenant, e.url, e.enabled_events, e.cursor_xact, e.cursor_seq, e.cursor_from_seq
      FROM webhook_endpoints e
     WHERE e.disabled_at IS NULL
       AND (p_tenants IS NULL OR e.tenant = ANY (p_tenants))
       AND (e.cursor_lease_expires_at IS NULL OR e.cursor_lease_expires_at <= now())
       AND EXISTS (SELECT 1 FROM events ev
                    WHERE ev.tenant = e.tenant AND ev.xact_id IS NOT NULL
                      AND (ev.xact_id, ev.seq) > (e.cursor_xact, e.cursor_seq) AND ev.xact_id < horizon)
     -- The cursor furthest behind first.
     ORDER BY e.cursor_xact, e.cursor_seq
     LIMIT room
     FOR UPDATE OF e SKIP LOCKED
  LOOP
    EXIT WHEN room <= 0;
    free := p_per_endpoint_max - (
      SELECT count(*) FROM webhook_deliveries l
       WHERE l.endpoint_id = candidate.id AND l.lease_expires_at IS NOT NULL AND l.lease_expires_at > now() AND l.state = 'pending');
    CONTINUE WHEN free <= 0;

    SELECT s.xact_id, s.seq, s.subscribed INTO last_xact, last_seq, subscribed
      FROM (SELECT ev.xact_id, ev.seq,
                   count(*) FILTER (WHERE ev.seq > candidate.cursor_from_seq
                                      AND (ev.type = ANY (candidate.enabled_events) OR '*' = ANY (candidate.enabled_events)))
                     OVER () AS subscribed
              FROM events ev
             WHERE ev.tenant = candidate.tenant AND ev.xact_id IS NOT NULL
               AND (ev.xact_id, ev.seq) > (candidate.cursor_xact, candidate.cursor_seq) AND ev.xact_id < horizon
             ORDER BY ev.xact_id, ev.seq
             LIMIT p_batch_events_max) s
     ORDER BY s.xact_id DESC, s.seq DESC
     LIMIT 1;
    CONTINUE WHEN last_xact IS NULL;

    IF subscribed = 0 THEN
      -- Nothing here for this endpoint: the cursor passes these events now.
      UPDATE webhook_endpoints SET cursor_xact = last_xact, cursor_seq = last_seq WHERE id = candidate.id;
      CONTINUE;
    END IF;

    slots := least(free, room);
    room := room - slots;
    UPDATE webhook_endpoints
       SET cursor_owner = p_owner, cursor_lease_expires_at = now() + p_lease_ms * interval '1 millisecond', cursor_slots = slots
     WHERE id = candidate.id;
    live_secrets := ARRAY(SELECT s.secret FROM webhook_endpoint_secrets s
                           WHERE s.endpoint_id = candidate.id AND (s.expires_at IS NULL OR s.expires_at > now())
                           ORDER BY s.created_at DESC, s.id DESC);
    RETURN QUERY
    SELECT 'cursor', NULL::bigint, candidate.id, candidate.tenant, candidate.url, 1, now(),
           ev.seq, ev.id, ev.type, ev.object_type, ev.object_id, ev.object_sequence, ev.data, ev.created_at, live_secrets,
           ev.xact_id::text, candidate.cursor_xact::text, candidate.cursor_seq, last_xact::text, last_seq, slots
      FROM events ev
     WHERE ev.tenant = candidate.tenant AND ev.xact_id IS NOT NULL
       AND (ev.xact_id, ev.seq) > (candidate.cursor_xact, candidate.cursor_seq) AND (ev.xact_id, ev.seq) <= (last_xact, last_seq)
       AND ev.seq > candidate.cursor_from_seq
       AND (ev.type = ANY (candidate.enabled_events) OR '*' = ANY (candidate.enabled_events))
     ORDER BY ev.xact_id, ev.seq;
  END LOOP;
END
$$;
