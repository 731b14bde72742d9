-- The largest amount, in minor units, any charge or refund may move: the contract's maximum
-- (docs/limits.md). The API's configurable ceiling (CHARGE_AMOUNT_MINOR_MAX) can only be lower;
-- the ledger holds every step to this one whatever its caller says, so an input that never went
-- through the API cannot move more. A SQL function, not a setting: it is inlined into each step.

CREATE OR REPLACE FUNCTION ledger_amount_minor_max() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT 1000000000000::bigint
$$;
