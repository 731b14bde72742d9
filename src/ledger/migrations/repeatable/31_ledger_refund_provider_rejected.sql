-- The provider refused, for good, to refund a succeeded refund of a provider charge: the ledger
-- gave the money back and the provider will not. Recorded once (the first reason stays); a refund
-- already recorded as refunded at the provider is returned unchanged (the refund exists, whatever a
-- later answer said). Refused (CGP02) as ledger_refund_provider_refunded refuses.

CREATE OR REPLACE FUNCTION ledger_refund_provider_rejected(
  p_tenant text, p_charge_key text, p_refund_key text, p_failure text
) RETURNS refunds LANGUAGE plpgsql AS $$
DECLARE
  r refunds;
BEGIN
  UPDATE refunds SET provider_refund_failure = p_failure
   WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key
     AND status = 'succeeded' AND provider_refund_id IS NULL AND provider_refund_failure IS NULL
     AND EXISTS (SELECT 1 FROM charges c
                  WHERE c.tenant = p_tenant AND c.idempotency_key = p_charge_key AND c.provider IS NOT NULL)
  RETURNING * INTO r;
  IF FOUND THEN
    RETURN r;
  END IF;
  SELECT * INTO r FROM refunds WHERE tenant = p_tenant AND charge_key = p_charge_key AND refund_key = p_refund_key;
  IF r.provider_refund_id IS NOT NULL OR r.provider_refund_failure IS NOT NULL THEN
    RETURN r;
  END IF;
  RAISE EXCEPTION 'refund % of charge % is not a succeeded refund of a provider charge', p_refund_key, p_charge_key
    USING ERRCODE = 'CGP02';
END $$;
