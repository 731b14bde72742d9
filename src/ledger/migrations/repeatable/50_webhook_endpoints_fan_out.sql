-- Fan-out to webhook endpoints (docs/webhook-endpoints.md): every event row makes its deliveries in
-- the transaction that writes it (trigger events_fan_out_to_webhook_endpoints), so no event is
-- committed without them, and no cursor over events.seq is kept (a transaction with a smaller seq
-- may commit after one with a larger). An endpoint receives the events of its tenant written after
-- it was created, while it is enabled, of the types it subscribes to (or all, `*`).

CREATE OR REPLACE FUNCTION webhook_endpoints_fan_out() RETURNS trigger LANGUAGE plpgsql AS $$
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
