-- Up Migration

-- Confirm becomes a HOT update of the charge row.
--
-- Until now four indexes of charges named the hold state (charges_by_state, and the partial
-- indexes of open holds by expiry, by key and by tenant), so every Confirm, Cancel and decline
-- wrote a new entry into every one of the table's indexes (seven) instead of rewriting the row in
-- place: a third of the ledger's index work per charge. Now:
--   * open_holds holds one row per TRIED charge (a work list: the hold sweeper, reconcile's
--     overdue holds and the open-holds limits read it), kept by a trigger on charges in the same
--     transaction (ledger_track_open_hold), so it cannot drift from the charges it mirrors;
--   * no index of charges names hold_state, held_minor, captured_minor, refunded_minor,
--     hold_expires_at or updated_at, so a state change touches no index (a HOT update);
--   * listing newest first (with or without a status) walks charges_by_tenant_created, which the
--     state index never served: listing sorted the tenant's charges;
--   * charges pages are filled to 60% by inserts: the rest is room for the Confirm's new version
--     on the same page, which HOT needs (the old versions are pruned as the page fills).

CREATE TABLE open_holds (
  tenant            text NOT NULL,
  idempotency_key   text NOT NULL,
  -- When the Try reserved (the charge's updated_at then).
  held_since        timestamptz NOT NULL,
  -- Manual captures only: automatic charges are confirmed or cancelled by their workflow.
  hold_expires_at   timestamptz,
  created_by_key_id text,
  PRIMARY KEY (tenant, idempotency_key)
);
CREATE INDEX open_holds_by_expiry ON open_holds (hold_expires_at) WHERE hold_expires_at IS NOT NULL;
CREATE INDEX open_holds_by_key ON open_holds (created_by_key_id) WHERE created_by_key_id IS NOT NULL;

-- As repeatable/11_ledger_track_open_hold.sql defines it today.
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

-- Taken before the backfill so no charge changes state between the copy and the trigger.
LOCK TABLE charges IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER charges_open_hold_inserted AFTER INSERT ON charges
  FOR EACH ROW WHEN (NEW.hold_state = 'TRIED') EXECUTE FUNCTION ledger_track_open_hold();
CREATE TRIGGER charges_open_hold_changed AFTER UPDATE OF hold_state, hold_expires_at, created_by_key_id ON charges
  FOR EACH ROW WHEN (OLD.hold_state = 'TRIED' OR NEW.hold_state = 'TRIED') EXECUTE FUNCTION ledger_track_open_hold();

INSERT INTO open_holds (tenant, idempotency_key, held_since, hold_expires_at, created_by_key_id)
SELECT tenant, idempotency_key, updated_at, hold_expires_at, created_by_key_id FROM charges WHERE hold_state = 'TRIED';

DROP INDEX charges_by_state;
DROP INDEX charges_open_holds;
DROP INDEX charges_open_holds_by_key;
DROP INDEX charges_open_holds_by_tenant;
CREATE INDEX charges_by_tenant_created ON charges (tenant, created_at, idempotency_key);
ALTER TABLE charges SET (fillfactor = 60);

-- Down Migration
ALTER TABLE charges RESET (fillfactor);
DROP INDEX charges_by_tenant_created;
CREATE INDEX charges_open_holds_by_tenant ON charges (tenant) WHERE hold_state = 'TRIED';
CREATE INDEX charges_open_holds_by_key ON charges (created_by_key_id)
  WHERE hold_state = 'TRIED' AND created_by_key_id IS NOT NULL;
CREATE INDEX charges_open_holds ON charges (hold_expires_at) WHERE hold_state = 'TRIED';
CREATE INDEX charges_by_state ON charges (tenant, hold_state, created_at);
DROP TRIGGER charges_open_hold_changed ON charges;
DROP TRIGGER charges_open_hold_inserted ON charges;
DROP FUNCTION ledger_track_open_hold();
DROP TABLE open_holds;
