-- The provider declined authorize (or the payer failed to authenticate): the charge is DECLINED
-- with the caller's decline code and the provider's exact one, and the hold on the clearing account
-- is released, in one transaction. A charge already decided is returned as it is.

CREATE OR REPLACE FUNCTION ledger_provider_declined(
  p_tenant text, p_key text, p_payment_id text, p_decline_code text, p_provider_decline_code text
) RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
BEGIN
  SELECT * INTO r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  IF NOT FOUND OR r.provider IS NULL THEN
    RAISE EXCEPTION 'charge % is not a provider charge the ledger knows', p_key USING ERRCODE = 'CGP02';
  END IF;
  IF r.provider_payment_id IS NOT NULL AND p_payment_id IS NOT NULL AND r.provider_payment_id <> p_payment_id THEN
    RAISE EXCEPTION 'charge % already has provider payment %; % is a duplicate', p_key, r.provider_payment_id, p_payment_id
      USING ERRCODE = 'CGP01';
  END IF;
  IF r.hold_state <> 'TRIED' OR r.provider_state NOT IN ('authorizing', 'requires_action') THEN
    RETURN r;
  END IF;

  UPDATE accounts SET pending_minor = pending_minor - r.held_minor
   WHERE tenant = p_tenant AND id = r.payer_account_id;
  UPDATE charges SET hold_state = 'DECLINED', held_minor = 0, hold_expires_at = NULL,
                     decline_code = p_decline_code, provider_state = 'declined',
                     provider_decline_code = p_provider_decline_code,
                     provider_payment_id = coalesce(provider_payment_id, p_payment_id),
                     provider_next_action = NULL, updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key
   RETURNING * INTO STRICT r;
  RETURN r;
END $$;
