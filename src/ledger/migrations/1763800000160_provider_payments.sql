-- Up Migration

-- A charge paid through a payment service provider (docs/providers.md) keeps its provider side on
-- its own row, so every step that answers the provider records the answer in the same transaction
-- as the ledger change it decides (Try, the authorization's outcome, Confirm with the capture, the
-- void). Null on every charge between ledger accounts; adding nullable columns rewrites nothing.
--   provider                    the provider's name (src/domain/providers.ts); null: not a provider charge
--   payment_method              the payer's instrument at the provider, as the caller named it
--   provider_payment_id         the provider's payment (Stripe: pi_...), once it answered with one
--   provider_state              null (nothing sent), authorizing, requires_action, authorized,
--                               captured, voided, declined
--   provider_next_action        the provider's next_action while the payer must act
--   provider_decline_code       the provider's exact decline code (decline_code holds the caller's)
--   provider_authorize_sent_at  when authorize was first sent: the provider keeps a key's answer for
--                               a limited time, after which the charge is looked up before any resend
--   provider_capture_sent_at    when capture was first sent; while set and unanswered, Cancel refuses
--                               (the money may be moving at the provider)
ALTER TABLE charges
  ADD COLUMN provider                   text,
  ADD COLUMN payment_method             text,
  ADD COLUMN provider_payment_id        text,
  ADD COLUMN provider_state             text,
  ADD COLUMN provider_next_action       jsonb,
  ADD COLUMN provider_decline_code      text,
  ADD COLUMN provider_authorize_sent_at timestamptz,
  ADD COLUMN provider_capture_sent_at   timestamptz,
  ADD CONSTRAINT charges_provider_named
    CHECK ((provider IS NULL) = (payment_method IS NULL)
       AND (provider IS NULL OR provider ~ '^[a-z][a-z0-9_]{0,31}$')
       AND (payment_method IS NULL OR payment_method ~ '^[A-Za-z0-9_]{1,255}$')),
  ADD CONSTRAINT charges_provider_state
    CHECK (provider_state IS NULL
        OR (provider IS NOT NULL AND provider_state IN
            ('authorizing', 'requires_action', 'authorized', 'captured', 'voided', 'declined'))),
  -- A capture is recorded only with the ledger's Confirm, in one transaction.
  ADD CONSTRAINT charges_provider_captured_when_confirmed
    CHECK (provider_state IS DISTINCT FROM 'captured' OR hold_state = 'CONFIRMED');

-- Never two provider payments recorded for one charge, nor one payment for two charges.
CREATE UNIQUE INDEX charges_provider_payment ON charges (provider, provider_payment_id)
  WHERE provider_payment_id IS NOT NULL;
-- Reconciliation and the webhook receiver find a charge by its provider payment, and the open
-- provider charges by tenant.
CREATE INDEX charges_provider_open ON charges (tenant, created_at)
  WHERE provider IS NOT NULL AND provider_state IN ('authorizing', 'requires_action', 'authorized');

-- Down Migration
DROP INDEX IF EXISTS charges_provider_open;
DROP INDEX IF EXISTS charges_provider_payment;
ALTER TABLE charges
  DROP CONSTRAINT charges_provider_captured_when_confirmed,
  DROP CONSTRAINT charges_provider_state,
  DROP CONSTRAINT charges_provider_named,
  DROP COLUMN provider_capture_sent_at,
  DROP COLUMN provider_authorize_sent_at,
  DROP COLUMN provider_decline_code,
  DROP COLUMN provider_next_action,
  DROP COLUMN provider_state,
  DROP COLUMN provider_payment_id,
  DROP COLUMN payment_method,
  DROP COLUMN provider;
