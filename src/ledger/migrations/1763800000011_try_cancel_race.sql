-- Up Migration

-- Try and Cancel racing on a fresh key: both insert the same (tenant, key) and the same charge id.
-- `ON CONFLICT (tenant, idempotency_key)` only arbitrates the primary key, so when the loser of the
-- race met the winner's uncommitted row in the charge id's unique index it got a unique violation
-- on charges_id_key (a retryable fault, but a spurious one) instead of finding the winner's row.
-- The id is derived from (tenant, key), so a conflict on either index means "this key exists":
-- both functions now say `ON CONFLICT DO NOTHING` and read the row, as before. Nothing else changes.

CREATE OR REPLACE FUNCTION ledger_try(
  p_tenant text, p_key text, p_charge_id text, p_fingerprint text,
  p_order_id text, p_payer text, p_payee text, p_currency text, p_amount_minor bigint,
  p_capture_mode text, p_description text, p_metadata jsonb, p_hold_ttl_ms bigint
) RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
  v_payer accounts;
  v_payee accounts;
  v_decline text;
BEGIN
  -- Claim the key. A concurrent Try of the same key waits here on the unique index and then
  -- finds the row; it never reserves a second time.
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, held_minor, hold_expires_at)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, p_payer, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'TRIED', p_amount_minor,
          CASE WHEN p_capture_mode = 'manual' THEN now() + p_hold_ttl_ms * interval '1 millisecond' END)
  ON CONFLICT DO NOTHING
  RETURNING * INTO r;

  IF NOT FOUND THEN
    SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
    IF r.fingerprint <> p_fingerprint THEN
      RAISE EXCEPTION 'idempotency key % was first used for a different request', p_key
        USING ERRCODE = 'CGI01';
    END IF;
    IF r.hold_state = 'CANCELLED' THEN
      -- Anti-hanging: a Try that arrives after Cancel must never reserve.
      RAISE EXCEPTION 'charge % was cancelled before this Try; it will not reserve', p_key
        USING ERRCODE = 'CGH01';
    END IF;
    RETURN r; -- DECLINED, TRIED, CONFIRMED: the same answer as the first time
  END IF;

  SELECT * INTO v_payee FROM accounts WHERE tenant = p_tenant AND id = p_payee;
  SELECT * INTO v_payer FROM accounts WHERE tenant = p_tenant AND id = p_payer;
  v_decline := CASE
    WHEN v_payer.id IS NULL OR v_payee.id IS NULL THEN 'unknown_account'
    WHEN v_payer.currency <> p_currency OR v_payee.currency <> p_currency THEN 'currency_mismatch'
    WHEN v_payer.frozen OR v_payee.frozen THEN 'account_frozen'
  END;

  IF v_decline IS NULL THEN
    UPDATE accounts SET pending_minor = pending_minor + p_amount_minor
     WHERE tenant = p_tenant AND id = p_payer
       AND NOT frozen
       AND (allow_overdraft OR posted_minor - pending_minor >= p_amount_minor);
    IF NOT FOUND THEN
      v_decline := 'insufficient_funds';
    END IF;
  END IF;

  IF v_decline IS NOT NULL THEN
    UPDATE charges SET hold_state = 'DECLINED', held_minor = 0, hold_expires_at = NULL,
                       decline_code = v_decline, updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  RETURN r;
END $$;

CREATE OR REPLACE FUNCTION ledger_cancel(
  p_tenant text, p_key text, p_charge_id text, p_fingerprint text,
  p_order_id text, p_payer text, p_payee text, p_currency text, p_amount_minor bigint,
  p_capture_mode text, p_description text, p_metadata jsonb, p_reason text
) RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
BEGIN
  -- Null compensation: Cancel before any Try leaves a tombstone, so a late Try cannot reserve.
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, failure_reason)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, p_payer, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'CANCELLED', p_reason)
  ON CONFLICT DO NOTHING
  RETURNING * INTO r;
  IF FOUND THEN
    RETURN r;
  END IF;

  SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  CASE r.hold_state
    WHEN 'DECLINED', 'CANCELLED' THEN RETURN r; -- nothing held
    WHEN 'CONFIRMED' THEN
      RAISE EXCEPTION 'charge % was already captured; refund it instead', p_key USING ERRCODE = 'CGH04';
    ELSE NULL; -- TRIED: release below
  END CASE;

  UPDATE accounts SET pending_minor = pending_minor - r.held_minor
   WHERE tenant = p_tenant AND id = r.payer_account_id;
  UPDATE charges SET hold_state = 'CANCELLED', held_minor = 0, hold_expires_at = NULL,
                     failure_reason = p_reason, updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key
   RETURNING * INTO STRICT r;
  RETURN r;
END $$;

-- Down Migration
-- Deliberately keeps these definitions: the earlier ones differ only by the race above.
