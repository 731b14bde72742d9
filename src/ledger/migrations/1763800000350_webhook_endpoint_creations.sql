-- Up Migration

-- POST /v1/webhook-endpoints is exactly-once per Idempotency-Key (docs/webhook-endpoints.md,
-- "Retrying a registration"): one row per (tenant, key), written in the transaction that creates
-- the endpoint, so a retried create finds it and answers what the first answered, and five
-- identical creates at the same moment make one endpoint (they queue on the tenant's endpoint lock
-- and the first one's row answers the rest; the primary key is the backstop).
--   fingerprint  the request's (the v2 rule of src/domain/request-fingerprint.ts): a retry with
--                another body under the same key is an idempotency conflict, nothing created
--   endpoint_id  the endpoint it created. No foreign key: the row outlives the endpoint's deletion,
--                so a retry after a delete is told the endpoint is gone instead of creating a new one
--   secret_id    the secret the first answer carried, answered again by a replay (the secret itself
--                stays only in webhook_endpoint_secrets, deleted with its endpoint)
--   answer       the endpoint as the first answer showed it (its wire form, never a secret)
-- Kept for good, as charge and account keys are: a key never registers a second endpoint.
CREATE TABLE webhook_endpoint_creations (
  tenant           text        NOT NULL,
  idempotency_key  text        NOT NULL CHECK (idempotency_key ~ '^[\x21-\x7e]{1,255}$'),
  fingerprint      text        NOT NULL CHECK (fingerprint ~ '^v[0-9]+:[0-9a-f]{64}$'),
  endpoint_id      text        NOT NULL CHECK (endpoint_id ~ '^we_[A-Za-z0-9]{24}$'),
  secret_id        text        NOT NULL CHECK (secret_id ~ '^wes_[0-9a-f]{16}$'),
  answer           jsonb       NOT NULL CHECK (jsonb_typeof(answer) = 'object' AND NOT answer ? 'secret'),
  created_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, idempotency_key)
);
-- It names the secret of each endpoint: only the service's own roles read it, as the secrets.
REVOKE ALL ON webhook_endpoint_creations FROM PUBLIC;

-- Down Migration
DROP TABLE webhook_endpoint_creations;
