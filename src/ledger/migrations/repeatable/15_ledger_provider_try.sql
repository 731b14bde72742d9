-- Try for a provider charge (docs/providers.md): claim the key and reserve the amount on the tenant's
-- clearing account for the provider and currency, or record the decline. The same column of the
-- truth table as ledger_try, with the same key rules (fingerprint, anti-hanging) and the same
-- decisions from the ledger's own tables: the acting key and its mandate from the key's row, the
-- payee an ordinary usable account of the tenant, the amount within ledger_amount_minor_max(). Only
-- the payer differs: the clearing account (@provider/<provider>/<currency>, a system account created
-- on first use and allowed to go negative: it stands for what the provider will pay out), which no
-- caller can name, because this function derives it. The caller's instrument (p_payment_method) is
-- judged by the provider at authorize, after this hold exists.
--
-- The key and mandate checks restate ledger_try's, which inlines them to spare every ledger Try a
-- nested call; a change to the rule changes both (test/ledger-provider-steps.test.ts runs the same
-- refusals through both).

CREATE OR REPLACE FUNCTION ledger_provider_try(
  p_tenant text, p_key text, p_charge_id text, p_fingerprint text,
  p_order_id text, p_provider text, p_payment_method text, p_payee text, p_currency text,
  p_amount_minor bigint, p_capture_mode text, p_description text, p_metadata jsonb,
  p_hold_ttl_ms bigint, p_key_id text
) RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
  v_key api_keys;
  v_payee accounts;
  v_clearing text := '@provider/' || p_provider || '/' || p_currency;
  v_decline text;
BEGIN
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, held_minor, hold_expires_at, created_by_key_id,
                       provider, payment_method)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, v_clearing, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'TRIED', p_amount_minor,
          CASE WHEN p_capture_mode = 'manual' THEN now() + p_hold_ttl_ms * interval '1 millisecond' END,
          p_key_id, p_provider, p_payment_method)
  ON CONFLICT DO NOTHING
  RETURNING * INTO r;

  IF NOT FOUND THEN
    SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
    IF r.fingerprint <> p_fingerprint THEN
      RAISE EXCEPTION 'idempotency key % was first used for a different request', p_key
        USING ERRCODE = 'CGI01';
    END IF;
    IF r.hold_state = 'CANCELLED' THEN
      RAISE EXCEPTION 'charge % was cancelled before this Try; it will not reserve', p_key
        USING ERRCODE = 'CGH01';
    END IF;
    RETURN r;
  END IF;

  IF p_amount_minor > ledger_amount_minor_max() THEN
    v_decline := 'amount_too_large';
  ELSE
    IF p_key_id IS NOT NULL THEN
      SELECT * INTO v_key FROM api_keys WHERE id = p_key_id;
    END IF;
    v_decline := ledger_key_refusal(p_tenant, p_key_id, v_key, ARRAY['agent', 'admin']);
    IF v_decline IS NULL AND p_key_id IS NOT NULL AND (
         p_amount_minor > v_key.max_amount_minor OR p_amount_minor > v_key.daily_limit_minor
         OR p_currency <> v_key.currency OR p_payee <> ALL (v_key.allowed_payee_account_ids)) THEN
      v_decline := 'mandate_exceeded';
    END IF;
  END IF;

  IF v_decline IS NULL AND v_key.daily_limit_minor IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtextextended('ledger_try mandate ' || p_key_id, 0));
    IF (SELECT coalesce(sum(c.held_minor + c.captured_minor), 0) FROM charges c
         WHERE c.created_by_key_id = p_key_id AND c.created_at > now() - interval '24 hours'
           AND c.id <> p_charge_id)
       + p_amount_minor > v_key.daily_limit_minor THEN
      v_decline := 'mandate_exceeded';
    END IF;
  END IF;

  IF v_decline IS NULL THEN
    SELECT * INTO v_payee FROM accounts WHERE tenant = p_tenant AND id = p_payee;
    v_decline := CASE
      WHEN v_payee.id IS NULL OR v_payee.is_system THEN 'unknown_account'
      WHEN v_payee.currency <> p_currency THEN 'currency_mismatch'
      WHEN v_payee.frozen THEN 'account_frozen'
    END;
  END IF;

  IF v_decline IS NULL THEN
    INSERT INTO accounts (tenant, id, currency, allow_overdraft, is_system)
    VALUES (p_tenant, v_clearing, p_currency, true, true)
    ON CONFLICT DO NOTHING;
    UPDATE accounts SET pending_minor = pending_minor + p_amount_minor
     WHERE tenant = p_tenant AND id = v_clearing AND is_system AND allow_overdraft AND currency = p_currency;
    IF NOT FOUND THEN
      -- Someone made an ordinary account under the clearing account's name: never reserve on it.
      v_decline := 'unknown_account';
    ELSE
      RETURN r;
    END IF;
  END IF;

  UPDATE charges SET hold_state = 'DECLINED', held_minor = 0, hold_expires_at = NULL,
                     decline_code = v_decline, updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key
   RETURNING * INTO STRICT r;
  RETURN r;
END $$;
