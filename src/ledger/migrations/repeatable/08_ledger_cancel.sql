-- Cancel: release the hold. Cancel before any Try leaves a tombstone (null compensation), so a late
-- Try cannot reserve (anti-hanging). `ON CONFLICT DO NOTHING` without a target for the same reason
-- as in ledger_try. The release updates the payer's row directly: it lowers pending, never
-- available, and a direct update and a pending posting simply add up. A provider charge's hold is
-- released the same way (its payer is the clearing account); the void at the provider follows.

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
