-- Up Migration

-- Refunds: one row per (tenant, charge key, refund key), forever, like charges. A refund is a
-- decision: it either moved money (succeeded, with its transfer) or was refused (failed, with a
-- failure code), and a repeated request with the same refund key returns that same row.
CREATE TABLE refunds (
  tenant          text        NOT NULL,
  charge_key      text        NOT NULL,
  refund_key      text        NOT NULL CHECK (length(refund_key) BETWEEN 1 AND 255),
  id              text        NOT NULL UNIQUE,
  -- Copied from the charge (both immutable) so a refund reads without a join.
  charge_id       text        NOT NULL,
  currency        char(3)     NOT NULL,
  fingerprint     text        NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
  -- What the caller asked for; NULL means "whatever is left to refund".
  requested_minor bigint      CHECK (requested_minor IS NULL OR requested_minor > 0),
  -- What was refunded, or for a refused refund what would have been.
  amount_minor    bigint      NOT NULL CHECK (amount_minor >= 0),
  status          text        NOT NULL CHECK (status IN ('succeeded', 'failed')),
  failure_code    text        CHECK (failure_code IN ('exceeds_refundable', 'insufficient_funds')),
  transfer_id     bigint      UNIQUE REFERENCES transfers (id),
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant, charge_key, refund_key),
  FOREIGN KEY (tenant, charge_key) REFERENCES charges (tenant, idempotency_key),
  CONSTRAINT refunds_outcome CHECK (
    (status = 'succeeded' AND amount_minor > 0 AND transfer_id IS NOT NULL AND failure_code IS NULL)
    OR (status = 'failed' AND transfer_id IS NULL AND failure_code IS NOT NULL))
);

-- A refund decision is never rewritten: a correction is a new refund.
CREATE TRIGGER refunds_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON refunds
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- Listing by status ("what is still held", "what was refunded") without scanning the tenant.
CREATE INDEX charges_by_state ON charges (tenant, hold_state, created_at);

-- The transfer reference of a refund: `<charge key>/<refund key>`, readable in the journal. Keys
-- may contain '/', so '%' and '/' in the charge key are percent-encoded; the first unencoded '/'
-- is then the boundary and no two (charge key, refund key) pairs share a reference.
CREATE FUNCTION ledger_refund_reference(p_charge_key text, p_refund_key text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT replace(replace(p_charge_key, '%', '%25'), '/', '%2F') || '/' || p_refund_key
$$;

-- Refund: one function = one round trip = one transaction, safe to run any number of times,
-- concurrently. Lock order as in Try/Confirm/Cancel: the charge row first, then the two accounts in
-- id order. Every refund of a charge queues on the charge row, so each one decides on the refunded
-- total its predecessors left, and 20 concurrent refunds can never add up to more than the capture.
--
-- Refused, and recorded as a failed refund (a decision, replayed for this refund key forever):
--   exceeds_refundable  the amount is more than what is captured and not yet refunded;
--   insufficient_funds  the payee's available balance cannot cover it (unless it allows
--                       overdraft). Retrying would not help until money arrives, and a refund
--                       must not wait silently: the caller sees it at once and, once the payee
--                       is funded, asks again with a new refund key.
-- Refused without a trace (nothing to remember): unknown charge (CGN02), a charge that was never
-- captured (CGR01), a refund key first used with another amount (CGI01).
CREATE FUNCTION ledger_refund(
  p_tenant text, p_charge_key text, p_refund_key text, p_refund_id text, p_fingerprint text,
  p_amount_minor bigint
) RETURNS refunds LANGUAGE plpgsql AS $$
DECLARE
  c charges;
  r refunds;
  v_amount bigint;
  v_failure text;
  v_transfer_id bigint;
BEGIN
  SELECT * INTO c FROM charges WHERE tenant = p_tenant AND idempotency_key = p_charge_key FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'charge % does not exist', p_charge_key USING ERRCODE = 'CGN02';
  END IF;

  SELECT * INTO r FROM refunds
   WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key;
  IF FOUND THEN
    IF r.fingerprint <> p_fingerprint THEN
      RAISE EXCEPTION 'refund key % was first used for a different refund of charge %', p_refund_key, p_charge_key
        USING ERRCODE = 'CGI01';
    END IF;
    RETURN r; -- the first decision, whatever happened to the charge since
  END IF;

  IF c.hold_state <> 'CONFIRMED' THEN
    RAISE EXCEPTION 'charge % is %, not captured; only a captured charge can be refunded', p_charge_key, c.hold_state
      USING ERRCODE = 'CGR01';
  END IF;

  v_amount := coalesce(p_amount_minor, c.captured_minor - c.refunded_minor);
  IF v_amount < 1 OR c.refunded_minor + v_amount > c.captured_minor THEN
    v_failure := 'exceeds_refundable';
  ELSE
    PERFORM 1 FROM accounts
     WHERE tenant = p_tenant AND id IN (c.payer_account_id, c.payee_account_id)
     ORDER BY id FOR UPDATE;
    -- The refund comes out of the payee's available money, never out of funds it holds for
    -- others: the same rule as the accounts CHECK, asked first so it is a decision, not an error.
    UPDATE accounts SET posted_minor = posted_minor - v_amount
     WHERE tenant = p_tenant AND id = c.payee_account_id
       AND (allow_overdraft OR posted_minor - pending_minor >= v_amount);
    IF NOT FOUND THEN
      v_failure := 'insufficient_funds';
    END IF;
  END IF;

  IF v_failure IS NULL THEN
    -- The conditional write is the guard the decision above rests on; with the row locked it
    -- always matches, and if it ever did not, the whole refund rolls back as a system fault.
    UPDATE charges SET refunded_minor = refunded_minor + v_amount, updated_at = now()
     WHERE tenant = p_tenant AND idempotency_key = p_charge_key
       AND hold_state = 'CONFIRMED' AND refunded_minor + v_amount <= captured_minor;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'refund of % on charge % would exceed its capture', v_amount, p_charge_key;
    END IF;
    UPDATE accounts SET posted_minor = posted_minor + v_amount
     WHERE tenant = p_tenant AND id = c.payer_account_id;

    INSERT INTO transfers (tenant, kind, reference, currency, amount_minor)
    VALUES (p_tenant, 'refund', ledger_refund_reference(p_charge_key, p_refund_key), c.currency, v_amount)
    RETURNING id INTO v_transfer_id;
    INSERT INTO journal_entries (transfer_id, tenant, account_id, amount_minor) VALUES
      (v_transfer_id, p_tenant, c.payee_account_id, -v_amount),
      (v_transfer_id, p_tenant, c.payer_account_id, v_amount);
  END IF;

  INSERT INTO refunds (tenant, charge_key, refund_key, id, charge_id, currency, fingerprint,
                       requested_minor, amount_minor, status, failure_code, transfer_id)
  VALUES (p_tenant, p_charge_key, p_refund_key, p_refund_id, c.id, c.currency, p_fingerprint,
          p_amount_minor, v_amount, CASE WHEN v_failure IS NULL THEN 'succeeded' ELSE 'failed' END,
          v_failure, v_transfer_id)
  RETURNING * INTO r;
  RETURN r;
END $$;

-- Down Migration
DROP FUNCTION ledger_refund(text, text, text, text, text, bigint);
DROP FUNCTION ledger_refund_reference(text, text);
DROP INDEX charges_by_state;
DROP TABLE refunds;
