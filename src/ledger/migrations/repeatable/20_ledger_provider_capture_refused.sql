-- The provider refused the capture for good (the authorization was voided or expired there): the
-- capture is no longer in flight, so the charge may be cancelled; p_state records what the provider
-- said the payment is (voided), or keeps the state when it did not say.

CREATE OR REPLACE FUNCTION ledger_provider_capture_refused(p_tenant text, p_key text, p_state text)
RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
BEGIN
  UPDATE charges SET provider_capture_sent_at = NULL, provider_state = coalesce(p_state, provider_state),
                     updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key AND hold_state = 'TRIED' AND provider IS NOT NULL
  RETURNING * INTO r;
  IF NOT FOUND THEN
    SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
  END IF;
  RETURN r;
END $$;
