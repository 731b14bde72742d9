-- The outbox's charge writer for provider charges (docs/events.md): a deferred constraint trigger on
-- charges (charges_event, charges_state_event, both WHEN provider IS NOT NULL), so it runs at COMMIT
-- of the transaction that changed the row, inside it, and reads the row as that transaction leaves
-- it. A provider Try that claims its key as TRIED and then declines in the same transaction writes
-- one charge.declined, never a reserved nobody could have seen, and ledger_provider_confirm, which
-- captures through ledger_confirm and then records provider_state, writes one charge.succeeded. It
-- writes charge.<status> when the status the API shows is one a caller acts on (reserved,
-- requires_action, succeeded, declined, cancelled) and differs from the charge's last event, so a
-- transaction that touched the row twice writes one event. The row lock the change took is held
-- until this commit, so the object's events are numbered 1, 2, 3 in commit order without gaps.
-- A ledger charge's events (provider IS NULL) are written by its steps themselves, beside the change
-- (ledger_try, ledger_confirm, ledger_cancel; migration 1763800000300): cheaper than this trigger's
-- queued event and re-read, and those three are the only functions that change such a charge's status.

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
