-- Whether the acting key may move money for the tenant, judged from the ledger's own api_keys row
-- (k, read by the caller in its own transaction), never from what the caller says about the key.
-- Null when it may; otherwise the decline code 'key_not_authorized'. A key may act when:
--   * it exists and belongs to the tenant (a key of tenant b never acts for tenant a);
--   * its role is one of p_roles (src/domain/permissions.ts: agent and admin charge and refund);
--   * it is not revoked and not expired.
-- No key at all (p_key_id null) is the operator (the command line, the demo): accepted only in a
-- tenant that has never had an API key. Once a tenant has a key, every Try and Refund of it must
-- name one of its keys, so a workflow started by hand with no key moves none of its money.
-- Revoked keys still count as "had a key": revoking every key does not reopen the keyless door.

CREATE OR REPLACE FUNCTION ledger_key_refusal(p_tenant text, p_key_id text, k api_keys, p_roles text[])
RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_key_id IS NULL THEN
    IF EXISTS (SELECT 1 FROM api_keys WHERE tenant = p_tenant) THEN
      RETURN 'key_not_authorized';
    END IF;
    RETURN NULL;
  END IF;
  IF k.id IS DISTINCT FROM p_key_id OR k.tenant <> p_tenant OR NOT (k.role = ANY (p_roles))
     OR k.revoked_at IS NOT NULL OR k.expires_at <= now() THEN
    RETURN 'key_not_authorized';
  END IF;
  RETURN NULL;
END $$;
