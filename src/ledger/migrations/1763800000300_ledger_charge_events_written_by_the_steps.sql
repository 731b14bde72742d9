-- Up Migration

-- The outbox's cost at the ledger (docs/bench.md, The outbox's cost). A ledger charge's events are
-- written by its steps, not by the deferred trigger: ledger_try (charge.reserved or
-- charge.declined, once it has decided), ledger_confirm (charge.succeeded) and ledger_cancel
-- (charge.cancelled, the tombstone's included) insert the event beside their change, from the row
-- they already hold, in their own transaction: no queued trigger event, no re-read of the row at
-- COMMIT, no second plpgsql frame, and a Try's event is its first (sequence 1, no lookup). At 8
-- callers these were ~0.12-0.15 ms of the trigger's ~0.6-0.7 ms per Try + Confirm pair; the rest
-- was the INSERT, and most of the INSERT's own time the events table's CHECKs, below (figures in
-- docs/bench.md). The batched steps and the hold sweeper call these functions, so they write the
-- same way.
--
-- The deferred triggers stay for provider charges (provider IS NOT NULL): their steps may change a
-- charge twice in a transaction (ledger_provider_confirm captures through ledger_confirm and then
-- records provider_state) and a Try that claims and declines writes only its decline, which the
-- trigger's re-read at COMMIT gives without each provider function knowing. A provider charge's
-- Confirm or Cancel through ledger_confirm / ledger_cancel is left to the trigger (those functions
-- write only when provider IS NULL), so no charge gets its event from both.
--
-- events: the unique numbering key is reordered to (tenant, object_id, object_type,
-- object_sequence), the same columns and so the same rule, so that it also serves every read of
-- one object's events by (tenant, object_id) (GET /v1/events?object_id, the webhook endpoint's
-- disabled event, the writers' last-event lookup), and events_by_object, which did only that, is
-- dropped: one index fewer to update per event.
--
-- The three step functions are restated here as they are now (repeatable/06–08 hold the current
-- definitions), so that the triggers narrowed below and the functions that write instead commit
-- together: no transaction sees one without the other.


CREATE OR REPLACE FUNCTION ledger_try(
  p_tenant text, p_key text, p_charge_id text, p_fingerprint text,
  p_order_id text, p_payer text, p_payee text, p_currency text, p_amount_minor bigint,
  p_capture_mode text, p_description text, p_metadata jsonb, p_hold_ttl_ms bigint,
  p_key_id text, p_daily_limit_minor bigint
) RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
  v_key api_keys;
  v_payer accounts;
  v_payee accounts;
  v_decline text;
BEGIN
  -- Claim the key. A concurrent Try of the same key waits here on the unique index and then
  -- finds the row; it never reserves a second time.
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, held_minor, hold_expires_at, created_by_key_id)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, p_payer, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'TRIED', p_amount_minor,
          CASE WHEN p_capture_mode = 'manual' THEN now() + p_hold_ttl_ms * interval '1 millisecond' END,
          p_key_id)
  ON CONFLICT DO NOTHING
  RETURNING * INTO r;

  IF NOT FOUND THEN
    SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
    IF r.fingerprint <> p_fingerprint THEN
      RAISE EXCEPTION 'idempotency key % was first used for a different request', p_key
        USING ERRCODE = 'CGI01';
    END IF;
    IF r.hold_state = 'CANCELLED' THEN
      -- Anti-hanging: a Try that arrives after Cancel must never reserve.
      RAISE EXCEPTION 'charge % was cancelled before this Try; it will not reserve', p_key
        USING ERRCODE = 'CGH01';
    END IF;
    RETURN r; -- DECLINED, TRIED, CONFIRMED: the same answer as the first time
  END IF;

  -- The acting key: ledger_key_refusal's rule, written out here to spare every Try a nested
  -- plpgsql call (docs/back-door.md, the cost); ledger_refund calls the function.
  IF p_amount_minor > ledger_amount_minor_max() THEN
    v_decline := 'amount_too_large';
  ELSIF p_key_id IS NULL THEN
    IF EXISTS (SELECT 1 FROM api_keys WHERE tenant = p_tenant) THEN
      v_decline := 'key_not_authorized';
    END IF;
  ELSE
    SELECT * INTO v_key FROM api_keys WHERE id = p_key_id;
    v_decline := CASE
      WHEN v_key.id IS NULL OR v_key.tenant <> p_tenant OR v_key.role NOT IN ('agent', 'admin')
        OR v_key.revoked_at IS NOT NULL OR v_key.expires_at <= now() THEN 'key_not_authorized'
      WHEN p_amount_minor > v_key.max_amount_minor OR p_amount_minor > v_key.daily_limit_minor
        OR p_currency <> v_key.currency OR p_payee <> ALL (v_key.allowed_payee_account_ids) THEN 'mandate_exceeded'
    END;
  END IF;

  IF v_decline IS NULL AND v_key.daily_limit_minor IS NOT NULL THEN
    PERFORM pg_advisory_xact_lock(hashtextextended('ledger_try mandate ' || p_key_id, 0));
    -- Held (TRIED) or captured (CONFIRMED) money; declined and cancelled charges count zero.
    IF (SELECT coalesce(sum(c.held_minor + c.captured_minor), 0) FROM charges c
         WHERE c.created_by_key_id = p_key_id AND c.created_at > now() - interval '24 hours'
           AND c.id <> p_charge_id)
       + p_amount_minor > v_key.daily_limit_minor THEN
      v_decline := 'mandate_exceeded';
    END IF;
  END IF;

  IF v_decline IS NULL THEN
    -- The common case in one statement: both accounts ordinary and usable and the row's balance
    -- enough. Only the payer's row is locked (UPDATE ... FROM does not lock the payee).
    UPDATE accounts p SET pending_minor = p.pending_minor + p_amount_minor
      FROM accounts q
     WHERE p.tenant = p_tenant AND p.id = p_payer AND q.tenant = p_tenant AND q.id = p_payee
       AND NOT p.is_system AND NOT q.is_system
       AND p.currency = p_currency AND q.currency = p_currency AND NOT p.frozen AND NOT q.frozen
       AND (p.allow_overdraft OR p.posted_minor - p.pending_minor >= p_amount_minor);
    IF FOUND THEN
      -- The outbox (docs/events.md): the row was claimed by this call, so this is its first event.
      INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
      VALUES (ledger_event_id(), r.tenant, 'charge.reserved', 'charge', r.id, 1, jsonb_build_object('object', to_jsonb(r)));
      RETURN r;
    END IF;

    -- Otherwise find out why; funds are judged only after folding the payer's postings.
    SELECT * INTO v_payee FROM accounts WHERE tenant = p_tenant AND id = p_payee;
    SELECT * INTO v_payer FROM accounts WHERE tenant = p_tenant AND id = p_payer;
    v_decline := CASE
      WHEN v_payer.id IS NULL OR v_payee.id IS NULL OR v_payer.is_system OR v_payee.is_system THEN 'unknown_account'
      WHEN v_payer.currency <> p_currency OR v_payee.currency <> p_currency THEN 'currency_mismatch'
      WHEN v_payer.frozen OR v_payee.frozen THEN 'account_frozen'
    END;
  END IF;

  IF v_decline IS NULL THEN
    PERFORM ledger_fold_postings(p_tenant, p_payer);
    UPDATE accounts SET pending_minor = pending_minor + p_amount_minor
     WHERE tenant = p_tenant AND id = p_payer
       AND NOT frozen
       AND (allow_overdraft OR posted_minor - pending_minor >= p_amount_minor);
    IF NOT FOUND THEN
      v_decline := 'insufficient_funds';
    END IF;
  END IF;

  IF v_decline IS NOT NULL THEN
    UPDATE charges SET hold_state = 'DECLINED', held_minor = 0, hold_expires_at = NULL,
                       decline_code = v_decline, updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_key
     RETURNING * INTO STRICT r;
  END IF;
  -- One event for the decision, never the TRIED row claimed on the way to a decline.
  INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
  VALUES (ledger_event_id(), r.tenant, 'charge.' || ledger_charge_status(r.hold_state, r.captured_minor, r.refunded_minor, r.provider_state),
          'charge', r.id, 1, jsonb_build_object('object', to_jsonb(r)));
  RETURN r;
END $$;

CREATE OR REPLACE FUNCTION ledger_confirm(p_tenant text, p_key text, p_capture_minor bigint)
RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
  v_transfer_id bigint;
BEGIN
  -- While TRIED, held_minor = amount_minor (CHECK charges_held_only_while_tried), so the row this
  -- returns still says what was held: amount_minor.
  UPDATE charges SET hold_state = 'CONFIRMED', held_minor = 0,
                     captured_minor = coalesce(p_capture_minor, held_minor),
                     hold_expires_at = NULL, updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key AND hold_state = 'TRIED'
     AND coalesce(p_capture_minor, held_minor) BETWEEN 1 AND held_minor
     AND amount_minor <= ledger_amount_minor_max()
  RETURNING * INTO r;

  IF NOT FOUND THEN
    -- Not a capture this time: answer as the truth table says.
    SELECT * INTO r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'charge % was never tried; nothing to confirm', p_key USING ERRCODE = 'CGH02';
    END IF;
    CASE r.hold_state
      WHEN 'CONFIRMED' THEN RETURN r;
      WHEN 'DECLINED' THEN
        RAISE EXCEPTION 'charge % was declined (%); nothing to confirm', p_key, r.decline_code
          USING ERRCODE = 'CGH03';
      WHEN 'CANCELLED' THEN
        RAISE EXCEPTION 'charge % was cancelled; it can no longer be captured', p_key
          USING ERRCODE = 'CGH01';
      ELSE
        IF r.amount_minor > ledger_amount_minor_max() THEN
          RAISE EXCEPTION 'charge % holds % minor units, above the ledger''s maximum of %; it will not be captured',
            p_key, r.amount_minor, ledger_amount_minor_max() USING ERRCODE = 'CGK02';
        END IF;
        RAISE EXCEPTION 'capture of % is outside 1..% (the amount held for charge %)',
          coalesce(p_capture_minor, r.held_minor), r.held_minor, p_key
          USING ERRCODE = 'CGA01';
    END CASE;
  END IF;

  -- The outbox (docs/events.md): a ledger charge's event is written here; a provider charge's by the
  -- deferred trigger charges_state_event (its provider steps change it more than once a transaction).
  -- The row lock this UPDATE took is held to COMMIT, so no other event of the charge is numbered meanwhile.
  IF r.provider IS NULL THEN
    INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
    VALUES (ledger_event_id(), r.tenant, 'charge.' || ledger_charge_status(r.hold_state, r.captured_minor, r.refunded_minor, r.provider_state),
            'charge', r.id,
            coalesce((SELECT max(e.object_sequence) FROM events e WHERE e.tenant = r.tenant AND e.object_id = r.id AND e.object_type = 'charge'), 0) + 1,
            jsonb_build_object('object', to_jsonb(r)));
  END IF;

  INSERT INTO transfers (tenant, kind, reference, currency, amount_minor)
  VALUES (p_tenant, 'capture', p_key, r.currency, r.captured_minor)
  RETURNING id INTO v_transfer_id;
  -- The whole hold is released; only the captured part leaves the payer.
  WITH entries AS (
    INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES
      (v_transfer_id, p_tenant, r.payer_account_id, -r.captured_minor),
      (v_transfer_id, p_tenant, r.payee_account_id, r.captured_minor)
    RETURNING id, account_id, amount_minor
  )
  INSERT INTO pending_postings (tenant, account_id, entry_id, posted_delta_minor, pending_delta_minor)
  SELECT p_tenant, account_id, id, amount_minor, CASE WHEN amount_minor < 0 THEN -r.amount_minor ELSE 0 END
    FROM entries;

  IF v_transfer_id % 16 = 0 THEN
    PERFORM ledger_fold_postings_if_free(p_tenant, r.payer_account_id);
    PERFORM ledger_fold_postings_if_free(p_tenant, r.payee_account_id);
  END IF;
  RETURN r;
END $$;

CREATE OR REPLACE FUNCTION ledger_cancel(
  p_tenant text, p_key text, p_charge_id text, p_fingerprint text,
  p_order_id text, p_payer text, p_payee text, p_currency text, p_amount_minor bigint,
  p_capture_mode text, p_description text, p_metadata jsonb, p_reason text
) RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
BEGIN
  -- Null compensation: Cancel before any Try leaves a tombstone, so a late Try cannot reserve.
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, failure_reason)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, p_payer, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'CANCELLED', p_reason)
  ON CONFLICT DO NOTHING
  RETURNING * INTO r;
  IF FOUND THEN
    -- The outbox (docs/events.md): the tombstone's cancelled is the charge's first event.
    INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
    VALUES (ledger_event_id(), r.tenant, 'charge.cancelled', 'charge', r.id, 1, jsonb_build_object('object', to_jsonb(r)));
    RETURN r;
  END IF;

  SELECT * INTO STRICT r FROM charges WHERE tenant = p_tenant AND idempotency_key = p_key FOR UPDATE;
  CASE r.hold_state
    WHEN 'DECLINED', 'CANCELLED' THEN RETURN r; -- nothing held
    WHEN 'CONFIRMED' THEN
      RAISE EXCEPTION 'charge % was already captured; refund it instead', p_key USING ERRCODE = 'CGH04';
    ELSE NULL; -- TRIED: release below
  END CASE;
  IF r.provider_capture_sent_at IS NOT NULL THEN
    -- A provider charge whose capture was sent and not yet answered: the money may be moving at
    -- the provider, so the hold stays until the capture's answer is recorded (docs/providers.md).
    RAISE EXCEPTION 'charge % is being captured at its provider; it cannot be cancelled now', p_key
      USING ERRCODE = 'CGH05';
  END IF;

  UPDATE accounts SET pending_minor = pending_minor - r.held_minor
   WHERE tenant = p_tenant AND id = r.payer_account_id;
  UPDATE charges SET hold_state = 'CANCELLED', held_minor = 0, hold_expires_at = NULL,
                     failure_reason = p_reason, updated_at = now()
   WHERE tenant = p_tenant AND idempotency_key = p_key
   RETURNING * INTO STRICT r;
  -- A ledger charge's event here; a provider charge's (cancelling until its void) by the deferred
  -- trigger charges_state_event. The row is locked (FOR UPDATE above) until COMMIT.
  IF r.provider IS NULL THEN
    INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
    VALUES (ledger_event_id(), r.tenant, 'charge.cancelled', 'charge', r.id,
            coalesce((SELECT max(e.object_sequence) FROM events e WHERE e.tenant = r.tenant AND e.object_id = r.id AND e.object_type = 'charge'), 0) + 1,
            jsonb_build_object('object', to_jsonb(r)));
  END IF;
  RETURN r;
END $$;


DROP TRIGGER charges_event ON charges;
CREATE CONSTRAINT TRIGGER charges_event AFTER INSERT ON charges
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (new.provider IS NOT NULL)
  EXECUTE FUNCTION ledger_charge_event();
DROP TRIGGER charges_state_event ON charges;
CREATE CONSTRAINT TRIGGER charges_state_event AFTER UPDATE OF hold_state, provider_state ON charges
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (new.provider IS NOT NULL AND (old.hold_state IS DISTINCT FROM new.hold_state OR old.provider_state IS DISTINCT FROM new.provider_state))
  EXECUTE FUNCTION ledger_charge_event();

-- The same rules for an event's id, type and object, written so that they cost what a comparison
-- should: PostgreSQL's regular expressions expand a bounded repeat ({1,255}, {16,64}, {0,31}) into
-- that many states, and checking object_id's '^[\x21-\x7e]{1,255}$' took ~63 us, the id's ~20 us,
-- the type's ~7 us, per event (the whole insert without them: ~50 us). An unbounded repeat and a
-- length bound accept exactly the same strings (ASCII only, so characters are bytes);
-- test/events-ledger.test.ts holds each new check to the old pattern on the boundary cases.
ALTER TABLE events
  DROP CONSTRAINT events_id_check,
  ADD CONSTRAINT events_id_check CHECK (id ~ '^evt_[A-Za-z0-9]+$' AND length(id) BETWEEN 20 AND 68),
  DROP CONSTRAINT events_type_check,
  ADD CONSTRAINT events_type_check CHECK (
    type ~ '^[a-z][a-z_]*(\.[a-z][a-z_]*){1,3}$'
    AND length(split_part(type, '.', 1)) <= 32 AND length(split_part(type, '.', 2)) <= 32
    AND length(split_part(type, '.', 3)) <= 32 AND length(split_part(type, '.', 4)) <= 32),
  DROP CONSTRAINT events_object_type_check,
  ADD CONSTRAINT events_object_type_check CHECK (object_type ~ '^[a-z][a-z_]*$' AND length(object_type) <= 32),
  DROP CONSTRAINT events_object_id_check,
  ADD CONSTRAINT events_object_id_check CHECK (object_id ~ '^[\x21-\x7e]+$' AND length(object_id) <= 255);

ALTER TABLE events ADD CONSTRAINT events_object_sequence_unique UNIQUE (tenant, object_id, object_type, object_sequence);
ALTER TABLE events DROP CONSTRAINT events_tenant_object_type_object_id_object_sequence_key;
DROP INDEX events_by_object;

-- Down Migration
-- The functions keep writing (repeatable/ re-applies them on every migrate); the wider triggers then
-- find each ledger charge's status already its last event and write nothing more.
CREATE INDEX events_by_object ON events (tenant, object_id, object_sequence);
ALTER TABLE events
  DROP CONSTRAINT events_id_check, ADD CONSTRAINT events_id_check CHECK (id ~ '^evt_[A-Za-z0-9]{16,64}$'),
  DROP CONSTRAINT events_type_check, ADD CONSTRAINT events_type_check CHECK (type ~ '^[a-z][a-z_]{0,31}(\.[a-z][a-z_]{0,31}){1,3}$'),
  DROP CONSTRAINT events_object_type_check, ADD CONSTRAINT events_object_type_check CHECK (object_type ~ '^[a-z][a-z_]{0,31}$'),
  DROP CONSTRAINT events_object_id_check, ADD CONSTRAINT events_object_id_check CHECK (object_id ~ '^[\x21-\x7e]{1,255}$');
ALTER TABLE events ADD CONSTRAINT events_tenant_object_type_object_id_object_sequence_key UNIQUE (tenant, object_type, object_id, object_sequence);
ALTER TABLE events DROP CONSTRAINT events_object_sequence_unique;
DROP TRIGGER charges_state_event ON charges;
CREATE CONSTRAINT TRIGGER charges_state_event AFTER UPDATE OF hold_state, provider_state ON charges
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (old.hold_state IS DISTINCT FROM new.hold_state OR old.provider_state IS DISTINCT FROM new.provider_state)
  EXECUTE FUNCTION ledger_charge_event();
DROP TRIGGER charges_event ON charges;
CREATE CONSTRAINT TRIGGER charges_event AFTER INSERT ON charges
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_charge_event();
