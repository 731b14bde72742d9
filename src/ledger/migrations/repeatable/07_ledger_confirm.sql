-- Confirm: capture the hold (all of it, or p_capture_minor of it, releasing the rest). The charge
-- row is claimed and updated in one statement (TRIED only), and both postings are appended to
-- pending_postings: no account row is locked, so charges to one busy payee do not queue on its
-- row. Neither posting can lower an available balance (the payee is credited; the payer's hold
-- turns into a debit no larger than the hold). Every 16th transfer folds its two accounts without
-- ever waiting (SKIP LOCKED), so the queue of an account that is only ever credited stays short.
--
-- Confirm moves only what Try reserved, on the row Try decided from its own tables (accounts,
-- key, mandate: see ledger_try). It still refuses (ChargeNotAllowed, CGK02; the workflow then
-- cancels, releasing the hold) a hold above ledger_amount_minor_max(), which only a Try from before
-- that rule can have reserved: a comparison on the row itself, free. It does not probe the two
-- accounts for system ones again: that cost Try+Confirm throughput (docs/back-door.md) and guarded
-- only holds from before this version, which reconcile's system_accounts_move_only_by_deposit reports.

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
