-- Up Migration

-- One check per journal write instead of six.
--
-- A capture wrote two entries, and each entry paid for two foreign-key checks (its transfer, its
-- account: a lookup and a FOR KEY SHARE row lock each, the account's lock a WAL record on a row
-- that other charges are updating) and a deferred balance trigger (a sum over the transfer's
-- entries, per entry). Now one statement-level trigger (ledger_check_journal_insert) reads the
-- rows the statement wrote once: every transfer's legs balance and number at least two, and every
-- entry names a transfer and an account of its own tenant. The row locks are not needed for the
-- references to stay true, because neither side can go away: transfers were already append-only,
-- and accounts now refuse DELETE and TRUNCATE and a change of their key. The balance rule is
-- stricter than before (each statement balances, not only each transfer at commit); every ledger
-- function writes a transfer's legs in one statement.

-- As repeatable/14_ledger_check_journal_insert.sql defines it today.
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

CREATE TRIGGER accounts_never_removed BEFORE DELETE OR TRUNCATE ON accounts
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER accounts_key_fixed BEFORE UPDATE OF tenant, id ON accounts
  FOR EACH ROW WHEN (OLD.tenant IS DISTINCT FROM NEW.tenant OR OLD.id IS DISTINCT FROM NEW.id)
  EXECUTE FUNCTION ledger_refuse_change();

CREATE TRIGGER journal_entries_checked AFTER INSERT ON journal_entries
  REFERENCING NEW TABLE AS new_entries FOR EACH STATEMENT EXECUTE FUNCTION ledger_check_journal_insert();
DROP TRIGGER journal_entries_balanced ON journal_entries;
DROP FUNCTION ledger_check_transfer_balanced();
ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_transfer_id_fkey;
ALTER TABLE journal_entries DROP CONSTRAINT journal_entries_tenant_account_id_fkey;

-- Down Migration
ALTER TABLE journal_entries ADD CONSTRAINT journal_entries_tenant_account_id_fkey
  FOREIGN KEY (tenant, account_id) REFERENCES accounts (tenant, id);
ALTER TABLE journal_entries ADD CONSTRAINT journal_entries_transfer_id_fkey
  FOREIGN KEY (transfer_id) REFERENCES transfers (id);
CREATE FUNCTION ledger_check_transfer_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_sum bigint;
BEGIN
  SELECT coalesce(sum(amount_minor), 0) INTO v_sum FROM journal_entries WHERE transfer_id = NEW.transfer_id;
  IF v_sum <> 0 THEN
    RAISE EXCEPTION 'transfer % is unbalanced: entries sum to %', NEW.transfer_id, v_sum USING ERRCODE = 'CGJ02';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER journal_entries_balanced AFTER INSERT ON journal_entries
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_check_transfer_balanced();
DROP TRIGGER journal_entries_checked ON journal_entries;
DROP TRIGGER accounts_key_fixed ON accounts;
DROP TRIGGER accounts_never_removed ON accounts;
DROP FUNCTION ledger_check_journal_insert();
