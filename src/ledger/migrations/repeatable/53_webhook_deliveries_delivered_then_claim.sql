-- The deliverer's claim with the successes it has not recorded yet (docs/webhook-endpoints.md, How a
-- delivery is made): webhook_deliveries_delivered for the successes (the arrays, parallel, may be
-- empty), then webhook_deliveries_claim, in one statement and so one transaction. The answers of
-- one claim come in together and free their slots together; their record and the claim that
-- refills those slots were two transactions, each with its own round trip and commit, for the same
-- rows. The claim runs after the record in the same transaction, so it sees those deliveries'
-- leases cleared: the slots they held count as free, and the per-endpoint bound is counted exactly
-- as by a claim after a separate record. All or none: a claim that fails records none of the
-- successes, whose leases then expire and whose events are sent again, which at least once allows.

CREATE OR REPLACE FUNCTION webhook_deliveries_delivered_then_claim(
  p_delivery_id bigint[], p_endpoint_id text[], p_event_id text[], p_attempt integer[],
  p_started_at timestamptz[], p_duration_ms integer[], p_status_code integer[],
  p_owner text, p_lease_ms integer, p_per_endpoint_max integer, p_max integer, p_tenants text[]
) RETURNS TABLE (
  id bigint, endpoint_id text, tenant text, url text, attempts integer, created_at timestamptz,
  event_seq bigint, event_id text, event_type text, event_object_type text, event_object_id text,
  event_object_sequence integer, event_data jsonb, event_created_at timestamptz, secrets text[]
) LANGUAGE plpgsql AS $$
BEGIN
  IF cardinality(p_delivery_id) > 0 THEN
    PERFORM webhook_deliveries_delivered(p_delivery_id, p_endpoint_id, p_event_id, p_attempt, p_started_at, p_duration_ms, p_status_code);
  END IF;
  RETURN QUERY SELECT * FROM webhook_deliveries_claim(p_owner, p_lease_ms, p_per_endpoint_max, p_max, p_tenants);
END
$$;
