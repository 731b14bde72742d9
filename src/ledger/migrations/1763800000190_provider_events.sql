-- Up Migration

-- The payment providers' events about provider charges (docs/providers.md, Webhooks), one row per
-- (provider, event id): a provider delivers each event at least once, and a delivery whose event id
-- is here already is answered and does nothing. The row is written after what the event led to was
-- done, so a delivery that failed half-way (a crash, an outage) leaves no row and its redelivery
-- does the work; every action is idempotent (a signal only makes the charge's workflow read the
-- payment again; a void carries the charge's void key), so two deliveries racing do it once at the
-- provider.
--   payment_id   the provider's payment the event is about (null: not about a payment)
--   tenant, charge_key   the charge it concerned (null: no charge of ours)
--   action       what was done: signalled (the charge's running workflow), voided (an orphan
--                authorization of a cancelled or declined charge whose workflow had closed),
--                void_refused (the provider refused that void for good), no_action (the charge's
--                workflow had closed and nothing was left to do), no_charge (our reference, no
--                charge row), not_ours (a payment without our reference), not_a_payment
--   detail       why, for the operator
CREATE TABLE provider_events (
  provider     text        NOT NULL CHECK (provider ~ '^[a-z][a-z0-9_]{0,31}$'),
  event_id     text        NOT NULL CHECK (event_id ~ '^[\x21-\x7e]{1,255}$'),
  event_type   text        NOT NULL CHECK (event_type ~ '^[\x21-\x7e]{1,255}$'),
  payment_id   text        CHECK (payment_id ~ '^[\x21-\x7e]{1,255}$'),
  tenant       text,
  charge_key   text,
  action       text        NOT NULL CHECK (action IN
                 ('signalled', 'voided', 'void_refused', 'no_action', 'no_charge', 'not_ours', 'not_a_payment')),
  detail       text        CHECK (length(detail) <= 2000),
  received_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (provider, event_id),
  CHECK ((tenant IS NULL) = (charge_key IS NULL)),
  FOREIGN KEY (tenant, charge_key) REFERENCES charges (tenant, idempotency_key)
);
-- What happened to one charge's payment, in order of arrival (on-call, reconciliation).
CREATE INDEX provider_events_by_payment ON provider_events (provider, payment_id, received_at)
  WHERE payment_id IS NOT NULL;
-- An audit of what arrived and what it caused: corrections are new rows, never edits.
CREATE TRIGGER provider_events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON provider_events
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- Down Migration
DROP TABLE provider_events;
