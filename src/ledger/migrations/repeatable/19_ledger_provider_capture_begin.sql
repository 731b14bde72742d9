-- Before capture is sent to the provider: the charge must be held and authorized there. The first
-- send time is recorded, and from then on ledger_cancel refuses (CGH05) until the capture's answer
-- is recorded: money that may be moving at the provider is never released in the ledger.

CREATE OR REPLACE FUNCTION ledger_provider_capture_begin(p_tenant text, p_key text)
RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
BEGIN
  SELECT * INTO r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'charge % was never tried; nothing to capture', p_key USING ERRCODE = 'CGH02';
  END IF;
  CASE r.hold_state
    WHEN 'CONFIRMED' THEN RETURN r;
    WHEN 'CANCELLED' THEN
      RAISE EXCEPTION 'charge % was cancelled; it can no longer be captured', p_key USING ERRCODE = 'CGH01';
    WHEN 'DECLINED' THEN
      RAISE EXCEPTION 'charge % was declined (%); nothing to capture', p_key, r.decline_code USING ERRCODE = 'CGH03';
    ELSE NULL;
  END CASE;
  IF r.provider_state IS DISTINCT FROM 'authorized' OR r.provider_payment_id IS NULL THEN
    RAISE EXCEPTION 'charge % is not authorized at its provider (state %); nothing to capture', p_key, r.provider_state
      USING ERRCODE = 'CGP02';
  END IF;
  IF r.provider_capture_sent_at IS NULL THEN
    UPDATE charges SET provider_capture_sent_at = now(), updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  RETURN r;
END $$;
