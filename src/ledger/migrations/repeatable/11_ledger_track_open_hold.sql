-- open_holds follows charges: one row per TRIED charge, written by this trigger in the transaction
-- that moves the charge into or out of TRIED, so the two cannot disagree whichever function (or
-- operator) changed the charge. Invariant open_hold_iff_tried (src/ledger/invariants.ts) checks it.
-- The trigger's WHEN clauses (migration 0130) call this function only for rows in or leaving TRIED.

CREATE OR REPLACE FUNCTION ledger_track_open_hold() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.hold_state = 'TRIED' THEN
    INSERT INTO open_holds (tenant, idempotency_key, held_since, hold_expires_at, created_by_key_id)
    VALUES (NEW.tenant, NEW.idempotency_key, NEW.updated_at, NEW.hold_expires_at, NEW.created_by_key_id)
    ON CONFLICT (tenant, idempotency_key) DO UPDATE
      SET hold_expires_at = EXCLUDED.hold_expires_at, created_by_key_id = EXCLUDED.created_by_key_id;
  ELSE
    DELETE FROM open_holds WHERE tenant = OLD.tenant AND idempotency_key = OLD.idempotency_key;
  END IF;
  RETURN NULL;
END $$;
