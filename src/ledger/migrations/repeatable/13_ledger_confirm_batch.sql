-- Several Confirms in one transaction, as ledger_try_batch does for Trys (see there): each item is
-- exactly ledger_confirm, all or nothing, at most 64. Items run sorted by (tenant, key): Confirm
-- locks only its charge row (postings are appended; folding never waits), so that order is the
-- whole lock order. Rows come back in that order.

CREATE OR REPLACE FUNCTION ledger_confirm_batch(p_tenant text[], p_key text[], p_capture_minor bigint[])
RETURNS SETOF charges LANGUAGE plpgsql AS $$
DECLARE
  n int := cardinality(p_key);
  i bigint;
  r charges;
BEGIN
  IF n > 64 THEN
    RAISE EXCEPTION 'a Confirm batch holds at most 64 charges, not %', n USING ERRCODE = '54000';
  END IF;
  FOR i IN SELECT u.o FROM unnest(p_tenant, p_key) WITH ORDINALITY AS u (t, k, o) ORDER BY u.t, u.k LOOP
    r := ledger_confirm(p_tenant[i], p_key[i], p_capture_minor[i]);
    RETURN NEXT r;
  END LOOP;
END $$;
