-- The outbox's refund writer (docs/events.md): refund.succeeded or refund.failed, written by the
-- row trigger refunds_event in the transaction that records the refund's decision. A refund row is
-- decided when it is inserted (refunds_decision_fixed refuses changing it), so its event is its first.

CREATE OR REPLACE FUNCTION ledger_refund_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
  VALUES (ledger_event_id(), NEW.tenant, 'refund.' || NEW.status, 'refund', NEW.id,
          coalesce((SELECT max(e.object_sequence) FROM events e
                     WHERE e.tenant = NEW.tenant AND e.object_id = NEW.id AND e.object_type = 'refund'), 0) + 1,
          jsonb_build_object('object', to_jsonb(NEW)));
  RETURN NULL;
END $$;
