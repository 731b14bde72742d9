-- The same, only if nobody holds the row right now: Confirm's housekeeping must never wait.

CREATE OR REPLACE FUNCTION ledger_fold_postings_if_free(p_tenant text, p_account text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM accounts WHERE tenant = p_tenant AND id = p_account FOR NO KEY UPDATE SKIP LOCKED;
  IF FOUND THEN
    PERFORM ledger_fold_postings(p_tenant, p_account);
  END IF;
END $$;
