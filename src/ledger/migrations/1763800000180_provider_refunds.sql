-- Up Migration

-- A refund of a provider charge (docs/providers.md, Refunds) moves money twice: in the ledger
-- (ledger_refund: payee back to the clearing account) and at the provider (the payer's card). The
-- ledger's decision comes first and is never rewritten; what the provider then did is recorded on
-- the same row, once:
--   provider_refund_id       the provider's refund (Stripe: re_...), once it exists
--   provider_refunded_at     when it was recorded here
--   provider_refund_failure  the provider refused the refund for good: money the ledger gave back
--                            that the provider will not. An operator settles it (docs/providers.md)
--                            and may then record the refund made by hand in provider_refund_id.
-- Only a succeeded refund can have a provider side. Null on every refund of a ledger charge.
ALTER TABLE refunds
  ADD COLUMN provider_refund_id      text,
  ADD COLUMN provider_refunded_at    timestamptz,
  ADD COLUMN provider_refund_failure text,
  ADD CONSTRAINT refunds_provider_refund CHECK (
        (provider_refund_id IS NULL) = (provider_refunded_at IS NULL)
    AND (provider_refund_id IS NULL OR length(provider_refund_id) BETWEEN 1 AND 255)
    AND (provider_refund_failure IS NULL OR length(provider_refund_failure) BETWEEN 1 AND 2000)
    AND (status = 'succeeded' OR (provider_refund_id IS NULL AND provider_refund_failure IS NULL)));

-- The refunds table stays append-only for its decision: the statement trigger that refused every
-- UPDATE becomes one that refuses DELETE and TRUNCATE, and a row trigger that refuses any UPDATE
-- except writing a provider column that is still null (a provider refund id or a failure, each once).
DROP TRIGGER refunds_append_only ON refunds;
CREATE TRIGGER refunds_never_removed BEFORE DELETE OR TRUNCATE ON refunds
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER refunds_decision_fixed BEFORE UPDATE ON refunds FOR EACH ROW
  WHEN (to_jsonb(OLD) - ARRAY['provider_refund_id', 'provider_refunded_at', 'provider_refund_failure']
          IS DISTINCT FROM to_jsonb(NEW) - ARRAY['provider_refund_id', 'provider_refunded_at', 'provider_refund_failure']
     OR (OLD.provider_refund_id IS NOT NULL
         AND (OLD.provider_refund_id, OLD.provider_refunded_at) IS DISTINCT FROM (NEW.provider_refund_id, NEW.provider_refunded_at))
     OR (OLD.provider_refund_failure IS NOT NULL AND OLD.provider_refund_failure IS DISTINCT FROM NEW.provider_refund_failure))
  EXECUTE FUNCTION ledger_refuse_change();

-- On-call's list: provider refunds refused and not yet settled by hand.
CREATE INDEX refunds_provider_unsettled ON refunds (tenant, created_at)
  WHERE provider_refund_failure IS NOT NULL AND provider_refund_id IS NULL;

-- Down Migration
DROP FUNCTION IF EXISTS ledger_refund_provider_rejected(text, text, text, text);
DROP FUNCTION IF EXISTS ledger_refund_provider_refunded(text, text, text, text);
DROP INDEX refunds_provider_unsettled;
DROP TRIGGER refunds_decision_fixed ON refunds;
DROP TRIGGER refunds_never_removed ON refunds;
CREATE TRIGGER refunds_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON refunds
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
ALTER TABLE refunds
  DROP CONSTRAINT refunds_provider_refund,
  DROP COLUMN provider_refund_failure,
  DROP COLUMN provider_refunded_at,
  DROP COLUMN provider_refund_id;
