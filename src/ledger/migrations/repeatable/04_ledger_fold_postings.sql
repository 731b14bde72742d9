-- Folds the account's pending postings (appended by Confirm) into its row. The row lock is taken
-- first, then DELETE ... RETURNING and UPDATE: each posting is folded exactly once, and two folders
-- of one account queue on the row instead of deadlocking. Every step that lowers an available
-- balance folds the account first (or decides on the row alone when the row already suffices):
-- unfolded postings only ever add to what is available.

CREATE OR REPLACE FUNCTION ledger_fold_postings(p_tenant text, p_account text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_posted bigint;
  v_pending bigint;
BEGIN
  PERFORM 1 FROM accounts WHERE tenant = p_tenant AND id = p_account FOR NO KEY UPDATE;
  WITH folded AS (
    DELETE FROM pending_postings WHERE tenant = p_tenant AND account_id = p_account
    RETURNING posted_delta_minor, pending_delta_minor
  )
  SELECT sum(posted_delta_minor), sum(pending_delta_minor) INTO v_posted, v_pending FROM folded;
  IF v_posted IS NOT NULL THEN
    UPDATE accounts SET posted_minor = posted_minor + v_posted, pending_minor = pending_minor + v_pending
     WHERE tenant = p_tenant AND id = p_account;
  END IF;
END $$;
