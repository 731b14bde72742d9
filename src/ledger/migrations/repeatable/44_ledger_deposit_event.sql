-- The outbox's deposit writer (docs/events.md): deposit.credited, written by the deferred
-- constraint trigger transfers_deposit_event at COMMIT of the transaction that made the deposit,
-- when its journal entries (which name the credited account) exist. The object is the deposit as
-- POST /v1/accounts/{id}/deposits answers it (src/service/accounts-service.ts, depositToWire).

CREATE OR REPLACE FUNCTION ledger_deposit_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_account text;
BEGIN
  SELECT e.account_id INTO v_account FROM journal_entries e
   WHERE e.transfer_id = NEW.id AND e.amount_minor > 0 LIMIT 1;
  IF v_account IS NULL THEN
    RAISE EXCEPTION 'deposit transfer % credits no account', NEW.id USING ERRCODE = 'CGJ02';
  END IF;
  INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
  VALUES (ledger_event_id(), NEW.tenant, 'deposit.credited', 'deposit', 'dep_' || NEW.id, 1,
          jsonb_build_object('object', jsonb_build_object(
            'transfer_id', NEW.id, 'account_id', v_account, 'amount_minor', NEW.amount_minor,
            'currency', NEW.currency, 'created_at', NEW.created_at)));
  RETURN NULL;
END $$;
