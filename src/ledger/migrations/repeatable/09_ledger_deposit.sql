-- A deposit moves money into the ledger from the tenant's external system account for that
-- currency (created on first use, allowed to go negative: it mirrors money held outside).
-- Keyed by (tenant, reference): a redelivered webhook or a retried request deposits once.

-- p_key_id: the API key making the deposit, recorded on its transfer (null: the operator).
CREATE OR REPLACE FUNCTION ledger_deposit(p_tenant text, p_account text, p_amount_minor bigint, p_reference text, p_key_id text)
RETURNS TABLE (transfer_id bigint, account_id text, amount_minor bigint, currency char(3), created_at timestamptz, replayed boolean)
LANGUAGE plpgsql AS $$
DECLARE
  v_account accounts;
  v_external text;
  v_transfer transfers;
  v_existing_account text;
BEGIN
  SELECT * INTO v_account FROM accounts WHERE tenant = p_tenant AND id = p_account AND NOT is_system;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'account % does not exist', p_account USING ERRCODE = 'CGN01';
  END IF;
  v_external := '@external/' || v_account.currency;
  INSERT INTO accounts (tenant, id, currency, allow_overdraft, is_system)
  VALUES (p_tenant, v_external, v_account.currency, true, true)
  ON CONFLICT DO NOTHING;

  INSERT INTO transfers (tenant, kind, reference, currency, amount_minor, created_by_key_id)
  VALUES (p_tenant, 'deposit', p_reference, v_account.currency, p_amount_minor, p_key_id)
  ON CONFLICT (tenant, kind, reference) DO NOTHING
  RETURNING * INTO v_transfer;
  IF NOT FOUND THEN
    SELECT t.* INTO STRICT v_transfer FROM transfers t
     WHERE t.tenant = p_tenant AND t.kind = 'deposit' AND t.reference = p_reference;
    SELECT e.account_id INTO v_existing_account FROM journal_entries e
     WHERE e.transfer_id = v_transfer.id AND e.amount_minor > 0;
    IF v_transfer.amount_minor <> p_amount_minor OR v_existing_account <> p_account THEN
      RAISE EXCEPTION 'deposit key % was first used for a different deposit', p_reference USING ERRCODE = 'CGI01';
    END IF;
    RETURN QUERY SELECT v_transfer.id, p_account, v_transfer.amount_minor, v_transfer.currency, v_transfer.created_at, true;
    RETURN;
  END IF;

  PERFORM 1 FROM accounts WHERE tenant = p_tenant AND id IN (p_account, v_external) ORDER BY id FOR UPDATE;
  UPDATE accounts SET posted_minor = posted_minor - p_amount_minor WHERE tenant = p_tenant AND id = v_external;
  UPDATE accounts SET posted_minor = posted_minor + p_amount_minor WHERE tenant = p_tenant AND id = p_account;
  INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES
    (v_transfer.id, p_tenant, v_external, -p_amount_minor),
    (v_transfer.id, p_tenant, p_account, p_amount_minor);
  RETURN QUERY SELECT v_transfer.id, p_account, v_transfer.amount_minor, v_transfer.currency, v_transfer.created_at, false;
END $$;
