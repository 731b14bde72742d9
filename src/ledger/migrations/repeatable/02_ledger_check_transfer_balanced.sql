-- A transfer whose entries do not sum to zero cannot commit (deferred constraint trigger
-- journal_entries_balanced, so a transfer's entries may be inserted one by one).

CREATE OR REPLACE FUNCTION ledger_check_transfer_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_sum bigint;
BEGIN
  SELECT coalesce(sum(amount_minor), 0) INTO v_sum FROM journal_entries WHERE transfer_id = NEW.transfer_id;
  IF v_sum <> 0 THEN
    RAISE EXCEPTION 'transfer % is unbalanced: entries sum to %', NEW.transfer_id, v_sum USING ERRCODE = 'CGJ02';
  END IF;
  RETURN NULL;
END $$;
