-- Up Migration

-- Webhook endpoints (docs/webhook-endpoints.md): OUTBOUND deliveries of the events table to URLs a
-- tenant registers. Not to be confused with the INBOUND provider callbacks that credit money
-- (webhook_secrets, webhook_events; docs/webhooks.md).
--
--   enabled_events   the event types delivered to this endpoint (`charge.succeeded`, …), or `*` for all
--   disabled_at      set while the endpoint receives nothing, with disabled_reason:
--                      requested  the tenant disabled it (POST /v1/webhook-endpoints/{id} {disabled: true})
--                      gone       it answered 410 Gone
--                      failing    every attempt failed for WEBHOOK_DISABLE_AFTER_FAILING_MS
--   failing_since    when the current run of failed attempts began (null after a success): what the
--                    "failing for days" rule measures
--   seq              creation order, for listing newest first (a page cursor is the endpoint's id)
CREATE TABLE webhook_endpoints (
  seq              bigint      GENERATED ALWAYS AS IDENTITY UNIQUE,
  id               text        PRIMARY KEY CHECK (id ~ '^we_[A-Za-z0-9]{24}$'),
  tenant           text        NOT NULL,
  url              text        NOT NULL CHECK (url ~ '^https?://[\x21-\x7e]+$' AND length(url) <= 2048),
  enabled_events   text[]      NOT NULL CHECK (cardinality(enabled_events) BETWEEN 1 AND 64),
  description      text        CHECK (length(description) <= 500),
  disabled_at      timestamptz,
  disabled_reason  text        CHECK (disabled_reason IN ('requested', 'gone', 'failing')),
  failing_since    timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  CHECK ((disabled_at IS NULL) = (disabled_reason IS NULL))
);
CREATE INDEX webhook_endpoints_by_tenant ON webhook_endpoints (tenant, seq);

-- The signing secrets of each endpoint (`whsec_` + base64 of 32 random bytes, the Standard Webhooks
-- form). Kept in clear for the same reason as webhook_secrets: HMAC needs the very secret the
-- receiver holds. Whoever reads this table can forge deliveries to the tenants' receivers, so, as
-- webhook_secrets, nothing is granted to PUBLIC and only the service's own roles may read it; the
-- API answers a secret once, when it is made (create, rotate), and never again, and no log line
-- carries one. A table of its own, so that reading endpoints (lists, the API) never loads a secret.
--
-- A secret signs while expires_at is null or in the future. A rotation adds a new secret and gives
-- the endpoint's live ones an expires_at at the end of the overlap: until then every delivery
-- carries one signature per live secret.
CREATE TABLE webhook_endpoint_secrets (
  id           text        PRIMARY KEY CHECK (id ~ '^wes_[0-9a-f]{16}$'),
  endpoint_id  text        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
  secret       text        NOT NULL UNIQUE CHECK (secret ~ '^whsec_[A-Za-z0-9+/]{43}=$'),
  created_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz
);
CREATE INDEX webhook_endpoint_secrets_by_endpoint ON webhook_endpoint_secrets (endpoint_id, created_at);
REVOKE ALL ON webhook_endpoint_secrets FROM PUBLIC;

-- One delivery per event and endpoint (plus one per redelivery asked for), made by the trigger
-- below in the same transaction as the event. The deliverer (src/outbound/deliverer.ts) claims due
-- rows with FOR UPDATE SKIP LOCKED and leases them: lease_expires_at in the future means a process
-- is attempting it now; a process killed mid-attempt leaves a lease that simply expires, and the
-- row is claimed again (at least once: the receiver deduplicates by webhook-id = event id).
--   state      pending (to attempt at next_attempt_at), delivered (a 2xx), failed (no 2xx within
--              WEBHOOK_RETRY_WINDOW_MS, or the endpoint answered 410)
--   requested  true for a redelivery asked for through the API; at most one automatic delivery
--              per event and endpoint
CREATE TABLE webhook_deliveries (
  id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  endpoint_id       text        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
  event_id          text        NOT NULL REFERENCES events (id),
  tenant            text        NOT NULL,
  requested         boolean     NOT NULL DEFAULT false,
  state             text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
  attempts          integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  next_attempt_at   timestamptz NOT NULL DEFAULT now(),
  lease_owner       text,
  lease_expires_at  timestamptz,
  created_at        timestamptz NOT NULL DEFAULT now(),
  finished_at       timestamptz,
  CHECK ((state = 'pending') = (finished_at IS NULL))
);
CREATE UNIQUE INDEX webhook_deliveries_once ON webhook_deliveries (endpoint_id, event_id) WHERE NOT requested;
-- What the deliverer reads: each endpoint's pending rows by due time (delivered and failed rows
-- drop out), and its rows under a lease (what it has in flight; leases are cleared when recorded).
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (endpoint_id, next_attempt_at, id) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (endpoint_id) WHERE lease_expires_at IS NOT NULL;
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);

-- Every attempt, for the audit and GET /v1/webhook-endpoints/{id}/deliveries: when, to which
-- address, how long, the status code (null when no response came) or the error.
CREATE TABLE webhook_delivery_attempts (
  id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  delivery_id    bigint      NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
  endpoint_id    text        NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
  event_id       text        NOT NULL,
  attempt        integer     NOT NULL CHECK (attempt >= 1),
  started_at     timestamptz NOT NULL,
  duration_ms    integer     NOT NULL CHECK (duration_ms >= 0),
  status_code    integer     CHECK (status_code BETWEEN 100 AND 599),
  error          text        CHECK (length(error) <= 500),
  delivered      boolean     NOT NULL,
  CHECK (status_code IS NOT NULL OR error IS NOT NULL)
);
CREATE INDEX webhook_delivery_attempts_by_endpoint ON webhook_delivery_attempts (endpoint_id, id);
CREATE INDEX webhook_delivery_attempts_by_delivery ON webhook_delivery_attempts (delivery_id);

-- Fan-out: every event row makes its deliveries in the transaction that writes it, so there is no
-- window in which an event is committed without them (and no cursor over events.seq to keep, which
-- could skip a row whose transaction commits after a later seq). An endpoint receives the events of
-- its tenant written after it was created, while it is enabled, of the types it subscribes to.
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
CREATE TRIGGER events_fan_out_to_webhook_endpoints AFTER INSERT ON events
  FOR EACH ROW EXECUTE FUNCTION webhook_endpoints_fan_out();

-- Down Migration
DROP TRIGGER events_fan_out_to_webhook_endpoints ON events;
DROP FUNCTION webhook_endpoints_fan_out();
DROP TABLE webhook_delivery_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoint_secrets;
DROP TABLE webhook_endpoints;
