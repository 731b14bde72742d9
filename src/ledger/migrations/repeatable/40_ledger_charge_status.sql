-- The status a caller sees for a charges row (docs/lifecycle.md), as statusOfHold
-- (src/domain/charge.ts) computes it for the API: the outbox names its charge events by it
-- (charge.<status>). test/events-ledger.test.ts holds the two to the same answer for every state.

CREATE OR REPLACE FUNCTION ledger_charge_status(p_hold_state text, p_captured_minor bigint, p_refunded_minor bigint, p_provider_state text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE p_hold_state
    WHEN 'DECLINED' THEN 'declined'
    WHEN 'TRIED' THEN CASE WHEN p_provider_state = 'requires_action' THEN 'requires_action' ELSE 'reserved' END
    -- The provider may still hold the payment: its void is not recorded yet.
    WHEN 'CANCELLED' THEN CASE WHEN p_provider_state IN ('authorizing', 'authorized', 'requires_action') THEN 'cancelling' ELSE 'cancelled' END
    WHEN 'CONFIRMED' THEN CASE WHEN p_refunded_minor = 0 THEN 'succeeded'
                               WHEN p_refunded_minor >= p_captured_minor THEN 'refunded'
                               ELSE 'partially_refunded' END
  END
$$;
