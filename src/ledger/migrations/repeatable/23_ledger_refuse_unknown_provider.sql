-- Refuses a charge naming a provider this program has no connector for (trigger
-- charges_provider_known, migration 230): a forged workflow start otherwise made a clearing account
-- for any name (@provider/evil/USD) and held money on it. The names are in the trigger's WHEN clause,
-- which keeps this function off a ledger charge's path entirely. Class 23 (check_violation): a value
-- retrying cannot cure, so a Try gives up at once and the charge is decided.

CREATE OR REPLACE FUNCTION ledger_refuse_unknown_provider() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'provider % is not one this ledger knows (stripe)', NEW.provider
    USING ERRCODE = 'check_violation', COLUMN = 'provider', TABLE = 'charges';
END $$;
