-- Up Migration

-- charge_statuses says what the API says. The view knew only the ledger's hold state, so a card
-- charge waiting for its payer was listed as `reserved` and one the ledger cancelled while the
-- provider still held the payment as `cancelled`: GET /v1/charges?status=requires_action (or
-- cancelling) found nothing while GET /v1/charges/{key} showed that very status, and a listed card
-- charge lacked its `provider` (the view had none of the provider columns). The statuses now follow
-- src/domain/charge.ts's statusOfHold branch for branch (test/ledger-schema.test.ts compares them
-- row by row, card charges included), and the provider columns are appended (CREATE OR REPLACE may
-- only append columns).
CREATE OR REPLACE VIEW charge_statuses AS
SELECT 'reserved'::text AS status, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id, c.provider, c.payment_method, c.provider_payment_id, c.provider_state, c.provider_next_action, c.provider_decline_code, c.provider_authorize_sent_at, c.provider_capture_sent_at
  FROM charges c WHERE c.hold_state = 'TRIED' AND c.provider_state IS DISTINCT FROM 'requires_action'
UNION ALL
SELECT 'requires_action'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id, c.provider, c.payment_method, c.provider_payment_id, c.provider_state, c.provider_next_action, c.provider_decline_code, c.provider_authorize_sent_at, c.provider_capture_sent_at
  FROM charges c WHERE c.hold_state = 'TRIED' AND c.provider_state = 'requires_action'
UNION ALL
SELECT 'declined'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id, c.provider, c.payment_method, c.provider_payment_id, c.provider_state, c.provider_next_action, c.provider_decline_code, c.provider_authorize_sent_at, c.provider_capture_sent_at
  FROM charges c WHERE c.hold_state = 'DECLINED'
UNION ALL
SELECT 'cancelling'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id, c.provider, c.payment_method, c.provider_payment_id, c.provider_state, c.provider_next_action, c.provider_decline_code, c.provider_authorize_sent_at, c.provider_capture_sent_at
  FROM charges c WHERE c.hold_state = 'CANCELLED' AND c.provider_state IN ('authorizing', 'authorized', 'requires_action')
UNION ALL
SELECT 'cancelled'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id, c.provider, c.payment_method, c.provider_payment_id, c.provider_state, c.provider_next_action, c.provider_decline_code, c.provider_authorize_sent_at, c.provider_capture_sent_at
  FROM charges c WHERE c.hold_state = 'CANCELLED' AND (c.provider_state IN ('authorizing', 'authorized', 'requires_action')) IS NOT TRUE
UNION ALL
SELECT 'succeeded'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id, c.provider, c.payment_method, c.provider_payment_id, c.provider_state, c.provider_next_action, c.provider_decline_code, c.provider_authorize_sent_at, c.provider_capture_sent_at
  FROM charges c WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor = 0
UNION ALL
SELECT 'partially_refunded'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id, c.provider, c.payment_method, c.provider_payment_id, c.provider_state, c.provider_next_action, c.provider_decline_code, c.provider_authorize_sent_at, c.provider_capture_sent_at
  FROM charges c WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor > 0 AND c.refunded_minor < c.captured_minor
UNION ALL
SELECT 'refunded'::text, c.tenant, c.idempotency_key, c.id, c.fingerprint, c.order_id, c.payer_account_id, c.payee_account_id, c.currency, c.amount_minor, c.capture_mode, c.description, c.metadata, c.hold_state, c.held_minor, c.captured_minor, c.refunded_minor, c.decline_code, c.failure_reason, c.hold_expires_at, c.created_at, c.updated_at, c.created_by_key_id, c.provider, c.payment_method, c.provider_payment_id, c.provider_state, c.provider_next_action, c.provider_decline_code, c.provider_authorize_sent_at, c.provider_capture_sent_at
  FROM charges c WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor > 0 AND c.refunded_minor >= c.captured_minor;

-- Down Migration
-- CREATE OR REPLACE cannot drop a column: the view is re-created as 0110 left it.
DROP VIEW charge_statuses;
CREATE VIEW charge_statuses AS
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
