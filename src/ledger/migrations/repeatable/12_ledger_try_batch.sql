-- Several Trys in one transaction: one round trip and one commit for up to 64 charges, so a busy
-- ledger pays the per-transaction costs (the round trip, the commit's WAL flush, the statement's
-- start) once per batch instead of once per charge. Each item is exactly ledger_try (the same
-- function, so the same truth table, declines and idempotency); the batch is all or nothing: if any
-- item raises (a refusal, a deadlock, a timeout), nothing of the batch happened, and the caller
-- (src/ledger/step-batches.ts) runs each item alone to get each one's own answer.
--
-- Lock order: items run sorted by (tenant, payer, key), so two batches take the payers' rows in
-- the same order and cannot deadlock each other; a single step's order (charge row, then the
-- payer's row) holds within each item. Rows come back in that order, not the arguments'.

CREATE OR REPLACE FUNCTION ledger_try_batch(
  p_tenant text[], p_key text[], p_charge_id text[], p_fingerprint text[],
  p_order_id text[], p_payer text[], p_payee text[], p_currency text[], p_amount_minor bigint[],
  p_capture_mode text[], p_description text[], p_metadata text[], p_hold_ttl_ms bigint[],
  p_key_id text[], p_daily_limit_minor bigint[]
) RETURNS SETOF charges LANGUAGE plpgsql AS $$
DECLARE
  n int := cardinality(p_key);
  i bigint;
  r charges;
BEGIN
  IF n > 64 THEN
    RAISE EXCEPTION 'a Try batch holds at most 64 charges, not %', n USING ERRCODE = '54000';
  END IF;
  FOR i IN SELECT u.o FROM unnest(p_tenant, p_payer, p_key) WITH ORDINALITY AS u (t, p, k, o) ORDER BY u.t, u.p, u.k LOOP
    r := ledger_try(p_tenant[i], p_key[i], p_charge_id[i], p_fingerprint[i], p_order_id[i], p_payer[i], p_payee[i],
                    p_currency[i], p_amount_minor[i], p_capture_mode[i], p_description[i], p_metadata[i]::jsonb,
                    p_hold_ttl_ms[i], p_key_id[i], p_daily_limit_minor[i]);
    RETURN NEXT r;
  END LOOP;
END $$;
