-- The provider answered authorize with a payment that holds the money (p_state 'authorized') or
-- waits for the payer (p_state 'requires_action', with its next action): recorded on the charge in
-- one transaction. The payment id is recorded whatever the charge's state: a charge cancelled while
-- authorize was in flight keeps the id, so the void that must follow knows what to void (the caller
-- sees hold_state CANCELLED and voids). A second, different payment id for one charge is refused:
-- it is a duplicate at the provider, to be voided, never recorded over the first.

CREATE OR REPLACE FUNCTION ledger_provider_authorized(
  p_tenant text, p_key text, p_payment_id text, p_state text, p_next_action jsonb
) RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
BEGIN
  IF p_state NOT IN ('authorized', 'requires_action') THEN
    RAISE EXCEPTION 'ledger_provider_authorized records authorized or requires_action, not %', p_state
      USING ERRCODE = '22023';
  END IF;
  SELECT * INTO r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  IF NOT FOUND OR r.provider IS NULL THEN
    RAISE EXCEPTION 'charge % is not a provider charge the ledger knows', p_key USING ERRCODE = 'CGP02';
  END IF;
  IF r.provider_payment_id IS NOT NULL AND r.provider_payment_id <> p_payment_id THEN
    RAISE EXCEPTION 'charge % already has provider payment %; % is a duplicate', p_key, r.provider_payment_id, p_payment_id
      USING ERRCODE = 'CGP01';
  END IF;

  IF r.hold_state = 'TRIED' AND r.provider_state IN ('authorizing', 'requires_action') THEN
    UPDATE charges SET provider_payment_id = p_payment_id, provider_state = p_state,
                       provider_next_action = CASE WHEN p_state = 'requires_action' THEN p_next_action END,
                       updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  ELSIF r.provider_payment_id IS NULL THEN
    -- Cancelled (or decided) meanwhile: keep the id for the void, change nothing else.
    UPDATE charges SET provider_payment_id = p_payment_id, updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  RETURN r;
END $$;
