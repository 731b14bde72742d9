-- Up Migration

-- Provider callbacks (webhooks) that credit money: docs/webhooks.md.
--
-- The signing secrets of each payment provider. They are kept in clear, unlike API keys (which
-- are kept as SHA-256 hashes only): the server must compute HMAC-SHA256 with the very secret the
-- provider holds, and a hash of it cannot do that. Whoever can read this table can forge
-- callbacks, so it is meant for the service's own database roles alone (the owner, which
-- migrates, and the app role the service runs as): nothing is granted to PUBLIC, and a reporting
-- or read-only role must not be given access. The command line prints a secret once, when it is
-- made, and never again.
--
-- A secret verifies callbacks while it is neither revoked nor past expires_at. A rotation adds a
-- new secret and gives the provider's current ones an expires_at a little in the future, so both
-- verify while the provider switches over.
CREATE TABLE webhook_secrets (
  id          text        PRIMARY KEY CHECK (id ~ '^whk_[0-9a-f]{16}$'),
  provider    text        NOT NULL CHECK (provider ~ '^[a-z0-9][a-z0-9_-]{0,31}$'),
  secret      text        NOT NULL UNIQUE CHECK (secret ~ '^whsec_[A-Za-z0-9_-]{43}$'),
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz,
  revoked_at  timestamptz
);
CREATE INDEX webhook_secrets_by_provider ON webhook_secrets (provider, created_at);
REVOKE ALL ON webhook_secrets FROM PUBLIC;

-- One row per provider event that credited money, written in the same transaction as the
-- deposit's transfer: both commit, or neither does. The primary key makes an event id count once
-- per provider across ALL tenants, so an event redelivered (or replayed by someone holding an old
-- signed body) naming another tenant cannot credit a second time.
--
-- The deposit itself is an ordinary ledger_deposit, whose transfer records no API key
-- (created_by_key_id is null): the audit of a webhook credit is this row, naming the provider and
-- the event, and pointing at the transfer.
CREATE TABLE webhook_events (
  provider      text        NOT NULL CHECK (provider ~ '^[a-z0-9][a-z0-9_-]{0,31}$'),
  event_id      text        NOT NULL CHECK (event_id ~ '^[\x21-\x7e]{1,255}$'),
  event_type    text        NOT NULL,
  tenant        text        NOT NULL,
  account_id    text        NOT NULL,
  amount_minor  bigint      NOT NULL CHECK (amount_minor > 0),
  currency      char(3)     NOT NULL,
  transfer_id   bigint      NOT NULL UNIQUE REFERENCES transfers (id),
  -- The secret whose signature was accepted, for the audit (which secret a forged event used).
  secret_id     text        NOT NULL REFERENCES webhook_secrets (id),
  received_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (provider, event_id)
);
CREATE INDEX webhook_events_by_tenant ON webhook_events (tenant, received_at);
-- The audit of a credit, like the postings it explains: corrections are new rows, never edits.
CREATE TRIGGER webhook_events_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON webhook_events
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- Down Migration
DROP TABLE webhook_events;
DROP TABLE webhook_secrets;
