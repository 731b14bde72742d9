-- Up Migration

-- GET /v1/events?type=<type> lists a tenant's events of one type newest first. Without this index
-- the only way to that order is events_by_tenant (tenant, seq), read backwards past every event of
-- other types: a rare type (deposit.credited, webhook_endpoint.disabled) in a tenant of millions of
-- charge events read them all to fill one page, or to answer an empty one. With it, a page reads
-- its own rows and one more (test/events-type-index.test.ts shows the plans). `<object>.*` filters
-- of an object with one type (deposit.*, webhook_endpoint.*) are asked as that type and read in
-- order from it too (the unique key on (tenant, object_type, object_id, …) finds that object's rows
-- but sorts all of them for every page).
--
-- IF NOT EXISTS: migrations run in a transaction, so this build holds writes to events (every
-- charge's) for its duration. On a large ledger the operator can build it first without that pause,
-- `CREATE INDEX CONCURRENTLY events_by_type ON events (tenant, type, seq);`, and this finds it made.
CREATE INDEX IF NOT EXISTS events_by_type ON events (tenant, type, seq);

-- Down Migration
DROP INDEX events_by_type;
