-- What every statement that writes journal entries must satisfy, checked once per statement over
-- the rows it wrote (trigger journal_entries_checked, migration 0140):
--   * each transfer's entries in the statement sum to zero and are at least two, so every
--     transfer, whose entries are the sum of such statements, balances (a transfer's legs are
--     written together: every ledger function does);
--   * each entry names a transfer and an account of its own tenant. Neither can go away later:
--     transfers are append-only and accounts can be neither deleted nor renamed (migration 0140),
--     so what was true at the insert stays true.

CREATE OR REPLACE FUNCTION ledger_check_journal_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_bad record;
BEGIN
  SELECT transfer_id, sum(amount_minor) AS sum_minor, count(*) AS entries INTO v_bad
    FROM new_entries GROUP BY transfer_id HAVING sum(amount_minor) <> 0 OR count(*) < 2 LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'transfer % is unbalanced: the % entries written together sum to %',
      v_bad.transfer_id, v_bad.entries, v_bad.sum_minor USING ERRCODE = 'CGJ02';
  END IF;
  SELECT e.transfer_id, e.tenant, e.account_id INTO v_bad FROM new_entries e
   WHERE NOT EXISTS (SELECT 1 FROM transfers t WHERE t.id = e.transfer_id AND t.tenant = e.tenant)
      OR NOT EXISTS (SELECT 1 FROM accounts a WHERE a.tenant = e.tenant AND a.id = e.account_id)
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'journal entry of transfer % names no transfer or no account % of tenant %',
      v_bad.transfer_id, v_bad.account_id, v_bad.tenant USING ERRCODE = '23503';
  END IF;
  RETURN NULL;
END $$;
