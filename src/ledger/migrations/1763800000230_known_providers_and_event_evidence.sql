-- Up Migration

-- 1. Only providers this program has a connector for may be named by a charge. A workflow started by
-- hand past the API (docs/back-door.md) named `evil` and the provider Try created the clearing
-- account @provider/evil/USD and reserved money on it. The workflow refuses such a start first
-- (workflows/verify-start.ts); this is the ledger's own line. A trigger on INSERT (and on a change
-- of the column), not a CHECK: a CHECK is evaluated on every UPDATE of the row too, so a row written
-- before this migration could then never be cancelled; and its WHEN clause costs a ledger charge
-- (provider NULL) one comparison, no function call. The names are src/domain/providers.ts's
-- providerNames: adding a provider is a migration that replaces this function
-- (test/ledger-schema.test.ts compares the two). Class 23 (check_violation): a value retrying
-- cannot cure, so the Try gives up at once and the charge is decided (docs/providers.md). The
-- function is kept in repeatable/23_ledger_refuse_unknown_provider.sql too, as every ledger function is.
CREATE OR REPLACE FUNCTION ledger_refuse_unknown_provider() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'provider % is not one this ledger knows (stripe)', NEW.provider
    USING ERRCODE = 'check_violation', COLUMN = 'provider', TABLE = 'charges';
END $$;

CREATE TRIGGER charges_provider_known BEFORE INSERT OR UPDATE OF provider ON charges
  FOR EACH ROW WHEN (NEW.provider IS NOT NULL AND NEW.provider <> 'stripe')
  EXECUTE FUNCTION ledger_refuse_unknown_provider();

-- 2. A provider event whose payment the provider's own record does not back (its metadata names
-- another charge, or it is not the payment the ledger recorded for the charge) is recorded as
-- payment_mismatch, and nothing is done (docs/providers.md, Webhooks).
ALTER TABLE provider_events DROP CONSTRAINT provider_events_action_check;
ALTER TABLE provider_events ADD CONSTRAINT provider_events_action_check CHECK (action IN
  ('signalled', 'voided', 'void_refused', 'no_action', 'no_charge', 'not_ours', 'not_a_payment', 'payment_mismatch'));

-- Down Migration
ALTER TABLE provider_events DROP CONSTRAINT provider_events_action_check;
ALTER TABLE provider_events ADD CONSTRAINT provider_events_action_check CHECK (action IN
  ('signalled', 'voided', 'void_refused', 'no_action', 'no_charge', 'not_ours', 'not_a_payment'));
DROP TRIGGER charges_provider_known ON charges;
DROP FUNCTION ledger_refuse_unknown_provider();
