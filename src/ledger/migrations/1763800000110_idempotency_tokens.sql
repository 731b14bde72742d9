-- Up Migration

-- Idempotency tokens: single-use keys the server issues to callers that cannot mint good keys
-- themselves (an HTML form rendered once, submitted many times). The token string is itself a valid
-- idempotency key: the first use turns it into the key of the charge it creates (docs/idempotency-tokens.md).
-- Only a SHA-256 of the token is kept, as for API keys: an unused token is a bearer capability, and
-- a reader of this table should not be able to spend it. Rows stay once consumed: a consumed
-- token keeps working as its charge's key after expires_at, and that check reads this row.
CREATE TABLE idempotency_tokens (
  tenant           text        NOT NULL CHECK (tenant ~ '^[a-z0-9_-]{1,64}$'),
  token_hash       text        NOT NULL CHECK (token_hash ~ '^[0-9a-f]{64}$'),
  -- Audit: the API key that asked for it (null: issued without a key, by the operator).
  issued_by_key_id text,
  created_at       timestamptz NOT NULL DEFAULT now(),
  expires_at       timestamptz NOT NULL,
  -- Set by the first use, never cleared: from then on the token is a charge's key.
  consumed_at      timestamptz,
  PRIMARY KEY (tenant, token_hash),
  CHECK (expires_at > created_at)
);
-- Expired tokens nobody used are purged when the tenant asks for new ones.
CREATE INDEX idempotency_tokens_unused_by_expiry ON idempotency_tokens (tenant, expires_at)
  WHERE consumed_at IS NULL;

-- charge_statuses gains created_by_key_id. The view was created (migration 0050) with c.*, which
-- PostgreSQL expands once, at creation: the column charges gained later (0070) never reached it,
-- so listings could not show who created a charge. Named columns this time, so a later column of
-- charges is added here on purpose; CREATE OR REPLACE may only append columns, which this does.
CREATE OR REPLACE VIEW charge_statuses AS
SELECT 'reserved'::text AS status, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id
  FROM charges c WHERE c.hold_state = 'TRIED'
UNION ALL
SELECT 'declined'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id
  FROM charges c WHERE c.hold_state = 'DECLINED'
UNION ALL
SELECT 'cancelled'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id
  FROM charges c WHERE c.hold_state = 'CANCELLED'
UNION ALL
SELECT 'succeeded'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id
  FROM charges c WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor = 0
UNION ALL
SELECT 'partially_refunded'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id
  FROM charges c WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor > 0 AND c.refunded_minor < c.captured_minor
UNION ALL
SELECT 'refunded'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id
  FROM charges c WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor > 0 AND c.refunded_minor >= c.captured_minor;

-- Down Migration
-- CREATE OR REPLACE cannot drop a column: the view is re-created as 0050 left it, so that 0070's
-- down migration can drop charges.created_by_key_id again.
DROP VIEW charge_statuses;
CREATE VIEW charge_statuses AS
SELECT 'reserved'::text AS status, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at
  FROM charges c WHERE c.hold_state = 'TRIED'
UNION ALL
SELECT 'declined'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at
  FROM charges c WHERE c.hold_state = 'DECLINED'
UNION ALL
SELECT 'cancelled'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at
  FROM charges c WHERE c.hold_state = 'CANCELLED'
UNION ALL
SELECT 'succeeded'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at
  FROM charges c WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor = 0
UNION ALL
SELECT 'partially_refunded'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at
  FROM charges c WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor > 0 AND c.refunded_minor < c.captured_minor
UNION ALL
SELECT 'refunded'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at
  FROM charges c WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor > 0 AND c.refunded_minor >= c.captured_minor;
DROP TABLE idempotency_tokens;
