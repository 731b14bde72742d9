-- The transfer reference of a refund: `<charge key>/<refund key>`, readable in the journal. Keys
-- may contain '/', so '%' and '/' in the charge key are percent-encoded; the first unencoded '/'
-- is then the boundary and no two (charge key, refund key) pairs share a reference.

CREATE OR REPLACE FUNCTION ledger_refund_reference(p_charge_key text, p_refund_key text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
  SELECT replace(replace(p_charge_key, '%', '%25'), '/', '%2F') || '/' || p_refund_key
$$;
