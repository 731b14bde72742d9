-- The provider refunded a succeeded refund of a provider charge: its refund id is recorded on the
-- refund row, once, in one statement. Repeating it with the same id returns the row (a retry after
-- a lost answer); another id is a second provider refund for one of ours, never recorded (CGP01):
-- the caller reports it, since only one of the two can be ours. Also how an operator records a
-- refund made by hand after the provider refused ours (provider_refund_failure stays as history).
-- Refused (CGP02): no such refund, a refund the ledger refused, a refund of a ledger charge.

CREATE OR REPLACE FUNCTION ledger_refund_provider_refunded(
  p_tenant text, p_charge_key text, p_refund_key text, p_provider_refund_id text
) RETURNS refunds LANGUAGE plpgsql AS $$
DECLARE
  r refunds;
BEGIN
  UPDATE refunds SET provider_refund_id = p_provider_refund_id, provider_refunded_at = now()
   WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key
     AND status = 'succeeded' AND provider_refund_id IS NULL
     AND EXISTS (SELECT 1 FROM charges c
                  WHERE c.tenant = p_tenant AND c.idempotency_key = p_charge_key AND c.provider IS NOT NULL)
  RETURNING * INTO r;
  IF FOUND THEN
    RETURN r;
  END IF;
  SELECT * INTO r FROM refunds WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key;
  IF r.provider_refund_id = p_provider_refund_id THEN
    RETURN r;
  END IF;
  IF r.provider_refund_id IS NOT NULL THEN
    RAISE EXCEPTION 'refund % of charge % is already recorded as provider refund %, not %',
      p_refund_key, p_charge_key, r.provider_refund_id, p_provider_refund_id USING ERRCODE = 'CGP01';
  END IF;
  RAISE EXCEPTION 'refund % of charge % is not a succeeded refund of a provider charge', p_refund_key, p_charge_key
    USING ERRCODE = 'CGP02';
END $$;
