-- Up Migration

-- Mandates: what an agent key may charge. Every column is optional (null: no such rule).
--   max_amount_minor           the largest single charge, in minor units
--   daily_limit_minor          the most the key's charges may hold or capture in any 24 h, in minor
--                              units; enforced again inside ledger_try, serialised per key
--   allowed_payee_account_ids  the only payees the key may charge to
--   currency                   the only currency the key may charge in
--   expires_at                 after it the key authenticates nothing (like a revoked key)
ALTER TABLE api_keys
  ADD COLUMN max_amount_minor bigint CHECK (max_amount_minor > 0),
  ADD COLUMN daily_limit_minor bigint CHECK (daily_limit_minor > 0),
  ADD COLUMN allowed_payee_account_ids text[] CHECK (cardinality(allowed_payee_account_ids) > 0),
  ADD COLUMN currency text CHECK (currency ~ '^[A-Z]{3}$'),
  ADD COLUMN expires_at timestamptz;

-- Audit: the API key whose request created the charge (null: charges from before this migration,
-- the operator's command line, which acts with database access and not as a key, and the
-- tombstone a Cancel leaves when it wins the race against Try).
ALTER TABLE charges ADD COLUMN created_by_key_id text;

-- The rolling 24 h total of one key, summed inside ledger_try.
CREATE INDEX charges_created_by_key_recent ON charges (created_by_key_id, created_at)
  WHERE created_by_key_id IS NOT NULL;

-- ledger_try gains the acting key and its daily limit; CREATE OR REPLACE cannot change a
-- signature, so the old one goes first (the repeatable source creates the new one).
DROP FUNCTION ledger_try(text, text, text, text, text, text, text, text, bigint, text, text, jsonb, bigint);

-- Down Migration
DROP FUNCTION IF EXISTS ledger_try(text, text, text, text, text, text, text, text, bigint, text, text, jsonb, bigint, text, bigint);
DROP INDEX charges_created_by_key_recent;
ALTER TABLE charges DROP COLUMN created_by_key_id;
ALTER TABLE api_keys
  DROP COLUMN expires_at, DROP COLUMN currency, DROP COLUMN allowed_payee_account_ids,
  DROP COLUMN daily_limit_minor, DROP COLUMN max_amount_minor;
