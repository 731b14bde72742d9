-- The provider says nothing is held for this charge any more (voided by us or earlier, or no
-- payment exists): recorded on a charge the ledger already cancelled or declined. A charge still
-- held or captured is never marked voided: the void must come after the ledger's decision.

CREATE OR REPLACE FUNCTION ledger_provider_voided(p_tenant text, p_key text, p_payment_id text)
RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
BEGIN
  UPDATE charges SET provider_state = 'voided', provider_next_action = NULL,
                     provider_payment_id = coalesce(provider_payment_id, p_payment_id), updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key AND provider IS NOT NULL
     AND hold_state = 'CANCELLED' AND provider_state IS DISTINCT FROM 'voided'
     AND (p_payment_id IS NULL OR provider_payment_id IS NULL OR provider_payment_id = p_payment_id)
  RETURNING * INTO r;
  IF NOT FOUND THEN
    SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
  END IF;
  RETURN r;
END $$;
