-- Up Migration

-- Confirm no longer locks either account: postings are appended, and folded by the next debit.
--
-- Until now Confirm locked and updated the payee's and the payer's accounts rows, so every charge
-- to one merchant (and every charge of one busy payer) queued on that row for the whole
-- transaction, commit and WAL flush included: a hot account capped the ledger at one Confirm per
-- commit latency. Neither posting of a Confirm can lower an available balance (the payee is
-- credited; the payer's hold turns into a debit no larger than the hold), and the only rule a
-- balance must obey (available >= 0) is about what lowers it, so neither needs the row:
--
--   * Confirm appends one `pending_postings` row per journal entry it writes: the payee's credit
--     (+capture to posted) and the payer's settlement (-capture to posted, -hold to pending).
--     accounts.posted_minor / pending_minor are now the folded part of a balance; the balance is
--     the row plus its pending postings (view `account_balances`, which every reader uses).
--   * Folding moves an account's pending postings into its row in one transaction, under the
--     account's row lock, taken first: DELETE ... RETURNING, then UPDATE, so each posting is
--     folded exactly once and two folders of one account queue on the row, never deadlock.
--   * Every operation that lowers an available balance (a Try reserving on a payer, a refund
--     taking money back from a payee) judges it on the row after folding, or on the row alone
--     when that already suffices: unfolded postings only ever add to what is available, so a
--     balance the row alone covers is covered. The no-overdraft check stays exact, and the
--     accounts CHECK (posted_minor - pending_minor >= 0) stays true on the row at every moment.
--     A posting that commits while a debit is deciding was simply not there yet when the debit
--     decided (as before, when the debit would have waited for the lock and decided after it).
--   * Confirm folds its two accounts now and then (every 16th transfer) without ever waiting
--     (SKIP LOCKED), so the queue of an account that is only ever credited stays short.
-- Deposits, refunds' credit to the payer and Cancel's release still update the row directly: they
-- hold that row's lock anyway, and a direct update and a pending posting simply add up.
--
-- Lock order is unchanged (charge row, then accounts). The journal's foreign key check takes FOR
-- KEY SHARE on both accounts, which conflicts with FOR UPDATE but not FOR NO KEY UPDATE, so every
-- account lock below is FOR NO KEY UPDATE.
--
-- Any future function that lowers an account's available balance must fold it first (or decide
-- on the row alone only when the row suffices, as Try does).

CREATE TABLE pending_postings (
  tenant              text   NOT NULL,
  account_id          text   NOT NULL,
  -- The journal entry this posting mirrors (invariant pending_postings_mirror_journal).
  entry_id            bigint NOT NULL,
  posted_delta_minor  bigint NOT NULL CHECK (posted_delta_minor <> 0),
  -- A payer's settlement releases the hold it captured (held >= captured, so never positive).
  pending_delta_minor bigint NOT NULL CHECK (pending_delta_minor <= 0),
  PRIMARY KEY (tenant, account_id, entry_id)
);

-- Balances as the contract defines them: what readers (API, reconcile, invariants) must use.
CREATE VIEW account_balances AS
SELECT a.tenant, a.id, a.currency, a.allow_overdraft, a.frozen, a.is_system,
       (a.posted_minor + coalesce(p.posted_delta_minor, 0))::bigint AS posted_minor,
       (a.pending_minor + coalesce(p.pending_delta_minor, 0))::bigint AS pending_minor,
       a.created_at
  FROM accounts a
  LEFT JOIN LATERAL (SELECT sum(q.posted_delta_minor) AS posted_delta_minor, sum(q.pending_delta_minor) AS pending_delta_minor
                       FROM pending_postings q WHERE q.tenant = a.tenant AND q.account_id = a.id) p ON true;

-- Folds the account's pending postings into its row. Takes the row lock first (see above).
CREATE FUNCTION ledger_fold_postings(p_tenant text, p_account text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_posted bigint;
  v_pending bigint;
BEGIN
  PERFORM 1 FROM accounts WHERE tenant = p_tenant AND id = p_account FOR NO KEY UPDATE;
  WITH folded AS (
    DELETE FROM pending_postings WHERE tenant = p_tenant AND account_id = p_account
    RETURNING posted_delta_minor, pending_delta_minor
  )
  SELECT sum(posted_delta_minor), sum(pending_delta_minor) INTO v_posted, v_pending FROM folded;
  IF v_posted IS NOT NULL THEN
    UPDATE accounts SET posted_minor = posted_minor + v_posted, pending_minor = pending_minor + v_pending
     WHERE tenant = p_tenant AND id = p_account;
  END IF;
END $$;

-- The same, only if nobody holds the row right now: Confirm's housekeeping must never wait.
CREATE FUNCTION ledger_fold_postings_if_free(p_tenant text, p_account text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM accounts WHERE tenant = p_tenant AND id = p_account FOR NO KEY UPDATE SKIP LOCKED;
  IF FOUND THEN
    PERFORM ledger_fold_postings(p_tenant, p_account);
  END IF;
END $$;

-- Try: as in 1763800000011, with the reservation in one statement on the common path (the row
-- alone covers the amount), and the payer's pending postings folded before a reservation is
-- declined for want of funds.
CREATE OR REPLACE FUNCTION ledger_try(
  p_tenant text, p_key text, p_charge_id text, p_fingerprint text,
  p_order_id text, p_payer text, p_payee text, p_currency text, p_amount_minor bigint,
  p_capture_mode text, p_description text, p_metadata jsonb, p_hold_ttl_ms bigint
) RETURNS charges LANGUAGE plpgsql AS $$
DECLARE
  r charges;
  v_payer accounts;
  v_payee accounts;
  v_decline text;
BEGIN
  -- Claim the key. A concurrent Try of the same key waits here on the unique index and then
  -- finds the row; it never reserves a second time.
  INSERT INTO charges (tenant, idempotency_key, id, fingerprint, order_id, payer_account_id,
                       payee_account_id, currency, amount_minor, capture_mode, description, metadata,
                       hold_state, held_minor, hold_expires_at)
  VALUES (p_tenant, p_key, p_charge_id, p_fingerprint, p_order_id, p_payer, p_payee, p_currency,
          p_amount_minor, p_capture_mode, p_description, p_metadata, 'TRIED', p_amount_minor,
          CASE WHEN p_capture_mode = 'manual' THEN now() + p_hold_ttl_ms * interval '1 millisecond' END)
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

  -- The common case in one statement: both accounts usable and the row's balance enough. Only the
  -- payer's row is locked (UPDATE ... FROM does not lock the payee).
  UPDATE accounts p SET pending_minor = p.pending_minor + p_amount_minor
    FROM accounts q
   WHERE p.tenant = p_tenant AND p.id = p_payer AND q.tenant = p_tenant AND q.id = p_payee
     AND p.currency = p_currency AND q.currency = p_currency AND NOT p.frozen AND NOT q.frozen
     AND (p.allow_overdraft OR p.posted_minor - p.pending_minor >= p_amount_minor);
  IF FOUND THEN
    RETURN r;
  END IF;

  -- Otherwise find out why, as before; funds are judged only after folding the payer's postings.
  SELECT * INTO v_payee FROM accounts WHERE tenant = p_tenant AND id = p_payee;
  SELECT * INTO v_payer FROM accounts WHERE tenant = p_tenant AND id = p_payer;
  v_decline := CASE
    WHEN v_payer.id IS NULL OR v_payee.id IS NULL THEN 'unknown_account'
    WHEN v_payer.currency <> p_currency OR v_payee.currency <> p_currency THEN 'currency_mismatch'
    WHEN v_payer.frozen OR v_payee.frozen THEN 'account_frozen'
  END;

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
  RETURN r;
END $$;

-- Confirm: the charge row is claimed and updated in one statement (TRIED only); both postings are
-- appended, and no account row is locked.
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
        RAISE EXCEPTION 'capture of % is outside 1..% (the amount held for charge %)',
          coalesce(p_capture_minor, r.held_minor), r.held_minor, p_key
          USING ERRCODE = 'CGA01';
    END CASE;
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

-- Refund: as in 1763800000010, except that the payee's pending postings are folded before its
-- balance is judged (a refund right after the charge it refunds must see that charge's credit),
-- and the account locks are FOR NO KEY UPDATE (see the top of this file).
CREATE OR REPLACE FUNCTION ledger_refund(
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
     ORDER BY id FOR NO KEY UPDATE;
    PERFORM ledger_fold_postings(p_tenant, c.payee_account_id);
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
-- Folds every pending posting back into its row (no money may hide in a dropped table), then
-- removes the queue. The functions keep their new bodies, which without the table fail loudly:
-- re-apply 1763800000010/11's definitions (and 0001's ledger_confirm) to go back for real.
UPDATE accounts a SET posted_minor = a.posted_minor + p.posted_delta_minor, pending_minor = a.pending_minor + p.pending_delta_minor
  FROM (SELECT tenant, account_id, sum(posted_delta_minor) AS posted_delta_minor, sum(pending_delta_minor) AS pending_delta_minor
          FROM pending_postings GROUP BY tenant, account_id) p
 WHERE a.tenant = p.tenant AND a.id = p.account_id;
DROP VIEW account_balances;
DROP FUNCTION ledger_fold_postings_if_free(text, text);
DROP FUNCTION ledger_fold_postings(text, text);
DROP TABLE pending_postings;
