-- Up Migration

-- Audit, as charges.created_by_key_id: the API key whose request made the refund or the deposit
-- (null: rows from before this migration, and the operator's command line, which acts with
-- database access and not as a key). A deposit's key is kept on its transfer.
ALTER TABLE refunds ADD COLUMN created_by_key_id text;
ALTER TABLE transfers ADD COLUMN created_by_key_id text;

-- ledger_refund and ledger_deposit gain the acting key; CREATE OR REPLACE cannot change a
-- signature, so the old ones go first (the repeatable sources create the new ones).
DROP FUNCTION ledger_refund(text, text, text, text, text, bigint);
DROP FUNCTION ledger_deposit(text, text, bigint, text);

-- Down Migration
DROP FUNCTION IF EXISTS ledger_refund(text, text, text, text, text, bigint, text);
DROP FUNCTION IF EXISTS ledger_deposit(text, text, bigint, text, text);
ALTER TABLE transfers DROP COLUMN created_by_key_id;
ALTER TABLE refunds DROP COLUMN created_by_key_id;
