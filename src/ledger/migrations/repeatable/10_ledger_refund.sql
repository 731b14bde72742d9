-- Refund: one function = one round trip = one transaction, safe to run any number of times,
-- concurrently. Lock order as in Try/Confirm/Cancel: the charge row first, then the two accounts in
-- id order. Every refund of a charge queues on the charge row, so each one decides on the refunded
-- total its predecessors left, and 20 concurrent refunds can never add up to more than the capture.
-- The payee's pending postings are folded before its balance is judged (a refund right after the
-- charge it refunds must see that charge's credit). Account locks are FOR NO KEY UPDATE: the
-- journal's foreign key check takes FOR KEY SHARE on both accounts, which FOR UPDATE would block.
--
-- Refused, and recorded as a failed refund (a decision, replayed for this refund key forever):
--   exceeds_refundable  the amount is more than what is captured and not yet refunded (or than
--                       ledger_amount_minor_max(), which only a capture from before that rule can exceed);
--   insufficient_funds  the payee's available balance cannot cover it (unless it allows
--                       overdraft). Retrying would not help until money arrives, and a refund
--                       must not wait silently: the caller sees it at once and, once the payee
--                       is funded, asks again with a new refund key.
-- Refused without a trace (nothing to remember): unknown charge (CGN02), a charge that was never
-- captured (CGR01), a refund key first used with another amount (CGI01), and an acting key that
-- may not refund for the charge's tenant (CGK01, RefundNotAuthorized): ledger_key_refusal judges
-- the key from its own api_keys row (it exists, belongs to the tenant, is an agent or admin key,
-- is neither revoked nor expired; no key only in a tenant that never had one). The check comes
-- after the replay: a refund already decided answers its first decision to whoever repeats it.

CREATE OR REPLACE FUNCTION ledger_refund(
  p_tenant text, p_charge_key text, p_refund_key text, p_refund_id text, p_fingerprint text,
  p_amount_minor bigint, p_key_id text
) RETURNS refunds LANGUAGE plpgsql AS $$
DECLARE
  c charges;
  r refunds;
  v_key api_keys;
  v_amount bigint;
  v_failure text;
  v_transfer_id bigint;
BEGIN
  SELECT * INTO c FROM charges WHERE tenant = p_tenant AND idempotency_key = p_charge_key FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'charge % does not exist', p_charge_key USING ERRCODE = 'CGN02';
  END IF;

  SELECT * INTO r FROM refunds
   WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key;
  IF FOUND THEN
    IF r.fingerprint <> p_fingerprint THEN
      RAISE EXCEPTION 'refund key % was first used for a different refund of charge %', p_refund_key, p_charge_key
        USING ERRCODE = 'CGI01';
    END IF;
    RETURN r; -- the first decision, whatever happened to the charge since
  END IF;

  IF p_key_id IS NOT NULL THEN
    SELECT * INTO v_key FROM api_keys WHERE id = p_key_id;
  END IF;
  IF ledger_key_refusal(p_tenant, p_key_id, v_key, ARRAY['agent', 'admin']) IS NOT NULL THEN
    RAISE EXCEPTION 'the acting key % may not refund charges of tenant %', coalesce(p_key_id, '(none)'), p_tenant
      USING ERRCODE = 'CGK01';
  END IF;

  IF c.hold_state <> 'CONFIRMED' THEN
    RAISE EXCEPTION 'charge % is %, not captured; only a captured charge can be refunded', p_charge_key, c.hold_state
      USING ERRCODE = 'CGR01';
  END IF;

  v_amount := coalesce(p_amount_minor, c.captured_minor - c.refunded_minor);
  IF v_amount < 1 OR c.refunded_minor + v_amount > c.captured_minor OR v_amount > ledger_amount_minor_max() THEN
    v_failure := 'exceeds_refundable';
  ELSE
    PERFORM 1 FROM accounts
     WHERE tenant = p_tenant AND id IN (c.payer_account_id, c.payee_account_id)
     ORDER BY id FOR NO KEY UPDATE;
    PERFORM ledger_fold_postings(p_tenant, c.payee_account_id);
    -- The refund comes out of the payee's available money, never out of funds it holds for
    -- others: the same rule as the accounts CHECK, asked first so it is a decision, not an error.
    UPDATE accounts SET posted_minor = posted_minor - v_amount
     WHERE tenant = p_tenant AND id = c.payee_account_id
       AND (allow_overdraft OR posted_minor - pending_minor >= v_amount);
    IF NOT FOUND THEN
      v_failure := 'insufficient_funds';
    END IF;
  END IF;

  IF v_failure IS NULL THEN
    -- The conditional write is the guard the decision above rests on; with the row locked it
    -- always matches, and if it ever did not, the whole refund rolls back as a system fault.
    UPDATE charges SET refunded_minor = refunded_minor + v_amount, updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_charge_key
       AND hold_state = 'CONFIRMED' AND refunded_minor + v_amount <= captured_minor;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'refund of % on charge % would exceed its capture', v_amount, p_charge_key;
    END IF;
    UPDATE accounts SET posted_minor = posted_minor + v_amount
     WHERE tenant = p_tenant AND id = c.payer_account_id;

    INSERT INTO transfers (tenant, kind, reference, currency, amount_minor)
    VALUES (p_tenant, 'refund', ledger_refund_reference(p_charge_key, p_refund_key), c.currency, v_amount)
    RETURNING id INTO v_transfer_id;
    INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES
      (v_transfer_id, p_tenant, c.payee_account_id, -v_amount),
      (v_transfer_id, p_tenant, c.payer_account_id, v_amount);
  END IF;

  INSERT INTO refunds (tenant, charge_key, refund_key, id, charge_id, currency, fingerprint,
                       requested_minor, amount_minor, status, failure_code, transfer_id, created_by_key_id)
  VALUES (p_tenant, p_charge_key, p_refund_key, p_refund_id, c.id, c.currency, p_fingerprint,
          p_amount_minor, v_amount, CASE WHEN v_failure IS NULL THEN 'succeeded' ELSE 'failed' END,
          v_failure, v_transfer_id, p_key_id)
  RETURNING * INTO r;
  RETURN r;
END $$;
