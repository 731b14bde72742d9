-- Up Migration

-- The transactional outbox's writers (docs/events.md). The events table (migration 240) gets its
-- rows from triggers on the tables whose changes a caller acts on, not from each ledger function:
-- every function that changes a charge (Try, Confirm, Cancel, their batches, the provider steps,
-- the hold sweeper's cancel) and every future one writes its event without being told, and a
-- change cannot commit without it (the trigger runs in the change's transaction; if it fails, the
-- change fails). The functions are restated here as they are now (later versions live in
-- repeatable/, which runs after the versioned migrations):
--   charges_event, charges_state_event   deferred to COMMIT: charge.<status> from the row as the
--                                        transaction leaves it (42_ledger_charge_event.sql)
--   refunds_event                        refund.succeeded / refund.failed (43_ledger_refund_event.sql)
--   transfers_deposit_event              deferred to COMMIT: deposit.credited (44_ledger_deposit_event.sql)
-- Events are append-only (events_append_only), kept at least 30 days (today: never deleted).
-- Objects recorded before this migration get one event each, their state now, so the ledger and
-- the outbox match from the start (the invariants in src/ledger/invariants.ts).

CREATE OR REPLACE FUNCTION ledger_charge_status(p_hold_state text, p_captured_minor bigint, p_refunded_minor bigint, p_provider_state text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE p_hold_state
    WHEN 'DECLINED' THEN 'declined'
    WHEN 'TRIED' THEN CASE WHEN p_provider_state = 'requires_action' THEN 'requires_action' ELSE 'reserved' END
    -- The provider may still hold the payment: its void is not recorded yet.
    WHEN 'CANCELLED' THEN CASE WHEN p_provider_state IN ('authorizing', 'authorized', 'requires_action') THEN 'cancelling' ELSE 'cancelled' END
    WHEN 'CONFIRMED' THEN CASE WHEN p_refunded_minor = 0 THEN 'succeeded'
                               WHEN p_refunded_minor >= p_captured_minor THEN 'refunded'
                               ELSE 'partially_refunded' END
  END
$$;

CREATE OR REPLACE FUNCTION ledger_event_id() RETURNS text LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT 'evt_' || replace(gen_random_uuid()::text, '-', '')
$$;

CREATE OR REPLACE FUNCTION ledger_charge_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r charges;
  v_status text;
  v_last_type text;
  v_last_sequence integer;
BEGIN
  SELECT * INTO STRICT r FROM charges WHERE tenant = NEW.tenant AND idempotency_key = NEW.idempotency_key;
  v_status := ledger_charge_status(r.hold_state, r.captured_minor, r.refunded_minor, r.provider_state);
  IF v_status NOT IN ('reserved', 'requires_action', 'succeeded', 'declined', 'cancelled') THEN
    RETURN NULL;
  END IF;
  SELECT e.type, e.object_sequence INTO v_last_type, v_last_sequence FROM events e
   WHERE e.tenant = r.tenant AND e.object_id = r.id AND e.object_type = 'charge'
   ORDER BY e.object_sequence DESC LIMIT 1;
  IF v_last_type IS NOT DISTINCT FROM 'charge.' || v_status THEN
    RETURN NULL;
  END IF;
  INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
  VALUES (ledger_event_id(), r.tenant, 'charge.' || v_status, 'charge', r.id, coalesce(v_last_sequence, 0) + 1,
          jsonb_build_object('object', to_jsonb(r)));
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION ledger_refund_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
  VALUES (ledger_event_id(), NEW.tenant, 'refund.' || NEW.status, 'refund', NEW.id,
          coalesce((SELECT max(e.object_sequence) FROM events e
                     WHERE e.tenant = NEW.tenant AND e.object_id = NEW.id AND e.object_type = 'refund'), 0) + 1,
          jsonb_build_object('object', to_jsonb(NEW)));
  RETURN NULL;
END $$;

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

-- Only changes of the columns the status is made of wake the charge writer (a refund's
-- refunded_minor, a provider payment id recorded on a decided charge do not).
CREATE CONSTRAINT TRIGGER charges_event AFTER INSERT ON charges
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_charge_event();
CREATE CONSTRAINT TRIGGER charges_state_event AFTER UPDATE OF hold_state, provider_state ON charges
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (old.hold_state IS DISTINCT FROM new.hold_state OR old.provider_state IS DISTINCT FROM new.provider_state)
  EXECUTE FUNCTION ledger_charge_event();
CREATE TRIGGER refunds_event AFTER INSERT ON refunds FOR EACH ROW EXECUTE FUNCTION ledger_refund_event();
CREATE CONSTRAINT TRIGGER transfers_deposit_event AFTER INSERT ON transfers
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (new.kind = 'deposit')
  EXECUTE FUNCTION ledger_deposit_event();
-- An event, once written, is what a consumer may already have received: never changed.
CREATE TRIGGER events_append_only BEFORE DELETE OR UPDATE OR TRUNCATE ON events
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- Objects from before the outbox: one event each, as they stand now.
INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data, created_at)
SELECT ledger_event_id(), c.tenant, 'charge.' || s.status, 'charge', c.id, 1, jsonb_build_object('object', to_jsonb(c)), c.updated_at
  FROM charges c
 CROSS JOIN LATERAL (SELECT ledger_charge_status(c.hold_state, c.captured_minor, c.refunded_minor, c.provider_state) AS status) s
 WHERE s.status IN ('reserved', 'requires_action', 'succeeded', 'declined', 'cancelled')
 ORDER BY c.updated_at;
INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data, created_at)
SELECT ledger_event_id(), r.tenant, 'refund.' || r.status, 'refund', r.id, 1, jsonb_build_object('object', to_jsonb(r)), r.created_at
  FROM refunds r ORDER BY r.created_at;
INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data, created_at)
SELECT ledger_event_id(), t.tenant, 'deposit.credited', 'deposit', 'dep_' || t.id, 1,
       jsonb_build_object('object', jsonb_build_object('transfer_id', t.id, 'account_id', e.account_id,
         'amount_minor', t.amount_minor, 'currency', t.currency, 'created_at', t.created_at)), t.created_at
  FROM transfers t
 CROSS JOIN LATERAL (SELECT e.account_id FROM journal_entries e WHERE e.transfer_id = t.id AND e.amount_minor > 0 LIMIT 1) e
 WHERE t.kind = 'deposit' ORDER BY t.id;

-- Down Migration
DROP TRIGGER events_append_only ON events;
DROP TRIGGER transfers_deposit_event ON transfers;
DROP TRIGGER refunds_event ON refunds;
DROP TRIGGER charges_state_event ON charges;
DROP TRIGGER charges_event ON charges;
DROP FUNCTION ledger_deposit_event();
DROP FUNCTION ledger_refund_event();
DROP FUNCTION ledger_charge_event();
DROP FUNCTION ledger_event_id();
DROP FUNCTION ledger_charge_status(text, bigint, bigint, text);
