-- Before authorize is sent to the provider: the charge must still be held (a Cancel that came first
-- is the provider participant's null compensation: authorize is then never sent), and the first
-- send time is recorded once, so a retry knows whether the provider still keeps the key's answer.
-- Locks the charge row: it and ledger_cancel are serialised, so a Cancel either comes before (this
-- refuses) or after (and the void that follows it finds what authorize left).

CREATE OR REPLACE FUNCTION ledger_provider_authorize_begin(p_tenant text, p_key text)
RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
BEGIN
  SELECT * INTO r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'charge % was never tried; nothing to authorize', p_key USING ERRCODE = 'CGH02';
  END IF;
  -- Cancelled first: a tombstone left before Try carries no provider columns, and is still the record
  -- that authorize must never be sent.
  IF r.hold_state = 'CANCELLED' THEN
    RAISE EXCEPTION 'charge % was cancelled; authorize will not be sent', p_key USING ERRCODE = 'CGH01';
  END IF;
  IF r.provider IS NULL THEN
    RAISE EXCEPTION 'charge % is not a provider charge', p_key USING ERRCODE = 'CGP02';
  END IF;
  IF r.hold_state = 'TRIED' AND r.provider_state IS NULL THEN
    UPDATE charges SET provider_state = 'authorizing', provider_authorize_sent_at = now(), updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  RETURN r; -- DECLINED, CONFIRMED, or a hold whose authorize was already sent or answered
END $$;
