-- Try: reserve the amount on the payer, or record the decline. Like every step (Try, Confirm, Cancel,
-- Refund) it is one function = one round trip = one transaction, follows one column of the truth
-- table (docs/contract.md, section 5) and is safe to run any number of times, concurrently, at any
-- moment. Lock order everywhere: the charge row first, then account rows in (tenant, id) order, so
-- concurrent steps cannot deadlock each other. Business refusals raise SQLSTATE class CG (see
-- src/domain/refusals.ts); everything else is a system fault and the caller retries it.
--
-- `ON CONFLICT DO NOTHING` has no target on purpose: Try and Cancel racing on a fresh key insert
-- the same (tenant, key) and the same charge id (derived from them), and a conflict on either
-- unique index means "this key exists", so the loser reads the winner's row instead of failing on
-- charges_id_key.
--
-- The common path reserves in one statement (the payer's row alone covers the amount); a
-- reservation is declined for want of funds only after the payer's pending postings are folded.
--
-- The ledger decides from its own tables, never from the caller's word (docs/back-door.md): a
-- Try's input may come from a workflow started by hand. After the key is claimed (so a repeated
-- Try still answers the first decision), the charge is DECLINED, nothing reserved, when
--   amount_too_large    the amount is above ledger_amount_minor_max() (10^12, the contract's maximum);
--   key_not_authorized  the acting key may not charge for the tenant (ledger_key_refusal's rule);
--   mandate_exceeded    the key's own row (not the input) forbids it: largest charge, currency,
--                       payees, or its rolling 24 h total (daily limit) with this charge;
--   unknown_account     payer or payee is not an ordinary account of the tenant (a system account
--                       such as @external/USD moves money only through ledger_deposit);
--   currency_mismatch, account_frozen, insufficient_funds as before.
-- The daily limit: the key's charges that hold or captured money in the last 24 h plus this one
-- must not exceed the key row's daily_limit_minor. Concurrent Trys of one key are serialised on a
-- transaction-scoped advisory lock on the key id, taken before the sum (each statement reads what
-- the previous holder committed), so concurrent charges cannot overshoot the limit together.
--
-- p_daily_limit_minor is ignored: the limit is read from the key's row. The parameter stays so that
-- workers of the previous version, and their prepared statements, keep calling this function.

CREATE OR REPLACE FUNCTION ledger_try(
  p_tenant text, p_key text, p_charge_id text, p_fingerprint text,
  p_order_id text, p_payer text, p_payee text, p_currency text, p_amount_minor bigint,
  p_capture_mode text, p_description text, p_metadata jsonb, p_hold_ttl_ms bigint,
  p_key_id text, p_daily_limit_minor bigint
) RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
  v_key api_keys;
  v_payer accounts;
  v_payee accounts;
  v_decline text;
BEGIN
  -- Claim the key. A concurrent Try of the same key waits here on the unique index and then
  -- finds the row; it never reserves a second time.
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, held_minor, hold_expires_at, created_by_key_id)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, p_payer, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'TRIED', p_amount_minor,
          CASE WHEN p_capture_mode = 'manual' THEN now() + p_hold_ttl_ms * interval '1 millisecond' END,
          p_key_id)
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

  -- The acting key: ledger_key_refusal's rule, written out here to spare every Try a nested
  -- plpgsql call (docs/back-door.md, the cost); ledger_refund calls the function.
  IF p_amount_minor > ledger_amount_minor_max() THEN
    v_decline := 'amount_too_large';
  ELSIF p_key_id IS NULL THEN
    IF EXISTS (SELECT 1 FROM api_keys WHERE tenant = p_tenant) THEN
      v_decline := 'key_not_authorized';
    END IF;
  ELSE
    SELECT * INTO v_key FROM api_keys WHERE id = p_key_id;
    v_decline := CASE
      WHEN v_key.id IS NULL OR v_key.tenant <> p_tenant OR v_key.role NOT IN ('agent', 'admin')
        OR v_key.revoked_at IS NOT NULL OR v_key.expires_at <= now() THEN 'key_not_authorized'
      WHEN p_amount_minor > v_key.max_amount_minor OR p_amount_minor > v_key.daily_limit_minor
        OR p_currency <> v_key.currency OR p_payee <> ALL (v_key.allowed_payee_account_ids) THEN 'mandate_exceeded'
    END;
  END IF;

  IF v_decline IS NULL AND v_key.daily_limit_minor IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtextextended('ledger_try mandate ' || p_key_id, 0));
    -- Held (TRIED) or captured (CONFIRMED) money; declined and cancelled charges count zero.
    IF (SELECT coalesce(sum(c.held_minor + c.captured_minor), 0) FROM charges c
         WHERE c.created_by_key_id = p_key_id AND c.created_at > now() - interval '24 hours'
           AND c.id <> p_charge_id)
       + p_amount_minor > v_key.daily_limit_minor THEN
      v_decline := 'mandate_exceeded';
    END IF;
  END IF;

  IF v_decline IS NULL THEN
    -- The common case in one statement: both accounts ordinary and usable and the row's balance
    -- enough. Only the payer's row is locked (UPDATE ... FROM does not lock the payee).
    UPDATE accounts p SET pending_minor = p.pending_minor + p_amount_minor
      FROM accounts q
     WHERE p.tenant = p_tenant AND p.id = p_payer AND q.tenant = p_tenant AND q.id = p_payee
       AND NOT p.is_system AND NOT q.is_system
       AND p.currency = p_currency AND q.currency = p_currency AND NOT p.frozen AND NOT q.frozen
       AND (p.allow_overdraft OR p.posted_minor - p.pending_minor >= p_amount_minor);
    IF FOUND THEN
      -- The outbox (docs/events.md): the row was claimed by this call, so this is its first event.
      INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
      VALUES (ledger_event_id(), r.tenant, 'charge.reserved', 'charge', r.id, 1, jsonb_build_object('object', to_jsonb(r)));
      RETURN r;
    END IF;

    -- Otherwise find out why; funds are judged only after folding the payer's postings.
    SELECT * INTO v_payee FROM accounts WHERE tenant = p_tenant AND id = p_payee;
    SELECT * INTO v_payer FROM accounts WHERE tenant = p_tenant AND id = p_payer;
    v_decline := CASE
      WHEN v_payer.id IS NULL OR v_payee.id IS NULL OR v_payer.is_system OR v_payee.is_system THEN 'unknown_account'
      WHEN v_payer.currency <> p_currency OR v_payee.currency <> p_currency THEN 'currency_mismatch'
      WHEN v_payer.frozen OR v_payee.frozen THEN 'account_frozen'
    END;
  END IF;

  IF v_decline IS NULL THEN
    PERFORM ledger_fold_postings(p_tenant, p_payer);
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
  -- One event for the decision, never the TRIED row claimed on the way to a decline.
  INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
  VALUES (ledger_event_id(), r.tenant, 'charge.' || ledger_charge_status(r.hold_state, r.captured_minor, r.refunded_minor, r.provider_state),
          'charge', r.id, 1, jsonb_build_object('object', to_jsonb(r)));
  RETURN r;
END $$;
