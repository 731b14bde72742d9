-- Up Migration

-- Reconcile's acting-key check (src/reconcile/authority.ts) judges the charges made without a key
-- (the operator's command line, or charges from before keys were recorded) on their own: whether
-- their tenant had a key by then. Without an index on them it walked every charge in primary-key
-- order to find them, one random heap read per charge: on a generated ledger of a million charges,
-- none of them without a key, that walk was about half of the check's time. With this one it reads
-- the keyless charges only.
--
-- Partial: only a charge without a key enters it, so a charge made through the API (always by a
-- key) never writes to it, and the Try's cost is unchanged.
--
-- IF NOT EXISTS: migrations run in a transaction, so this build holds writes to charges for its
-- duration (one scan of the table). On a large ledger the operator can build it first without that
-- pause, `CREATE INDEX CONCURRENTLY charges_without_key ON charges (tenant, idempotency_key) WHERE
-- created_by_key_id IS NULL;`, and this finds it made.
CREATE INDEX IF NOT EXISTS charges_without_key ON charges (tenant, idempotency_key) WHERE created_by_key_id IS NULL;

-- Down Migration
DROP INDEX charges_without_key;
