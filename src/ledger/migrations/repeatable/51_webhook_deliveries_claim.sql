-- The retry lane's claim (docs/webhook-endpoints.md, How a delivery is made): up to p_max due
-- delivery rows (retries of failed first attempts, redeliveries asked for, rows made before the
-- cursors) of enabled endpoints, leased to p_owner for p_lease_ms, never more than
-- p_per_endpoint_max in flight to one endpoint across every process (live leases count, whoever
-- holds them). Each row comes back with everything its attempt needs: the endpoint's URL, the event
-- and the endpoint's live signing secrets, newest first. One round trip per claim.
--
-- Claims of every process go one at a time under a transaction-scoped advisory lock, so that two
-- processes cannot both see an endpoint's last free slot. The lock is taken by its own statement
-- before the claim's: in a function each statement reads a snapshot taken when it starts, so the
-- claim sees every lease committed by the claim that held the lock before it. (Taking the lock
-- inside the claim statement would read a snapshot older than the lock, and could count an
-- endpoint's slots without the leases just committed.)
--
-- An endpoint's cursor (webhook_deliveries_take) holds some of its slots while its lease is live
-- (cursor_slots): they count as busy here, so the bound holds over both lanes.
--
-- The lease commits without waiting for the WAL flush (synchronous_commit off for this transaction
-- only): a database crash that loses it loses only the lease, and the row is claimed again.

CREATE OR REPLACE FUNCTION webhook_deliveries_claim(
  p_owner text, p_lease_ms integer, p_per_endpoint_max integer, p_max integer, p_tenants text[]
) RETURNS TABLE (
  id bigint, endpoint_id text, tenant text, url text, attempts integer, created_at timestamptz,
  event_seq bigint, event_id text, event_type text, event_object_type text, event_object_id text,
  event_object_sequence integer, event_data jsonb, event_created_at timestamptz, secrets text[]
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
  IF p_max <= 0 THEN
    RETURN;
  END IF;
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM pg_advisory_xact_lock(hashtextextended('webhook_deliveries:claim', 0));
  -- Each enabled endpoint's due rows, at most its free slots, read through the (endpoint, due
  -- time) index: a backlog of one endpoint costs this statement nothing beyond that endpoint's few
  -- rows, and never hides another endpoint's.
  RETURN QUERY
  WITH chosen AS (
    SELECT c.id FROM webhook_endpoints e
     CROSS JOIN LATERAL (
       SELECT count(*) AS n FROM webhook_deliveries l
        WHERE l.endpoint_id = e.id AND l.lease_expires_at IS NOT NULL AND l.lease_expires_at > now() AND l.state = 'pending') busy
     CROSS JOIN LATERAL (
       SELECT d.id, d.next_attempt_at FROM webhook_deliveries d
        WHERE d.endpoint_id = e.id AND d.state = 'pending' AND d.next_attempt_at <= now()
          AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= now())
        ORDER BY d.next_attempt_at, d.id
        LIMIT greatest(p_per_endpoint_max - busy.n - CASE WHEN e.cursor_lease_expires_at > now() THEN e.cursor_slots ELSE 0 END, 0)) c
     WHERE e.disabled_at IS NULL AND (p_tenants IS NULL OR e.tenant = ANY (p_tenants))
     ORDER BY c.next_attempt_at, c.id LIMIT p_max),
  locked AS (SELECT w.id FROM webhook_deliveries w WHERE w.id IN (SELECT chosen.id FROM chosen) FOR UPDATE SKIP LOCKED),
  claimed AS (
    UPDATE webhook_deliveries d
       SET lease_owner = p_owner, lease_expires_at = now() + p_lease_ms * interval '1 millisecond', attempts = d.attempts + 1
      FROM locked, webhook_endpoints e
     WHERE d.id = locked.id AND e.id = d.endpoint_id
    RETURNING d.id, d.endpoint_id, d.tenant, e.url, d.attempts, d.created_at, d.event_id)
  SELECT c.id, c.endpoint_id, c.tenant, c.url, c.attempts, c.created_at,
         ev.seq, ev.id, ev.type, ev.object_type, ev.object_id, ev.object_sequence, ev.data, ev.created_at,
         ARRAY(SELECT s.secret FROM webhook_endpoint_secrets s
                WHERE s.endpoint_id = c.endpoint_id AND (s.expires_at IS NULL OR s.expires_at > now())
                ORDER BY s.created_at DESC, s.id DESC)
    FROM claimed c JOIN events ev ON ev.id = c.event_id
   ORDER BY c.id;
END
$$;
