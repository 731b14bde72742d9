-- The provider captured p_captured_minor: Confirm moves that much from the clearing account to the
-- payee and the capture is recorded, in one transaction (ledger_confirm's postings and truth table;
-- a repeated call returns the CONFIRMED row).

CREATE OR REPLACE FUNCTION ledger_provider_confirm(p_tenant text, p_key text, p_captured_minor bigint)
RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
BEGIN
  SELECT * INTO r FROM ledger_confirm(p_tenant, p_key, p_captured_minor);
  IF r.provider IS NULL THEN
    RAISE EXCEPTION 'charge % is not a provider charge', p_key USING ERRCODE = 'CGP02';
  END IF;
  IF r.provider_state IS DISTINCT FROM 'captured' THEN
    UPDATE charges SET provider_state = 'captured', provider_capture_sent_at = coalesce(provider_capture_sent_at, now()),
                       updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  RETURN r;
END $$;
