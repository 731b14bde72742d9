-- Up Migration

-- Buckets for callers without a valid API key, in the same table and with the same refill-and-take
-- statement as the key and tenant buckets, so every API process shares them (docs/limits.md):
--   stranger          subject: a source address; /v1 and /mcp requests without a proven API key
--   webhook_address   subject: a source address; POST /v1/webhooks/{provider}
--   webhook_provider  subject: a provider name;  POST /v1/webhooks/{provider}, every address together
--   health            subject: a source address; /healthz and /readyz
-- A full bucket and a missing row mean the same (a new bucket starts full), so the API deletes the
-- full rows of these scopes now and then: addresses come and go, keys and tenants do not.
ALTER TABLE rate_limit_buckets DROP CONSTRAINT rate_limit_buckets_scope_check;
ALTER TABLE rate_limit_buckets ADD CONSTRAINT rate_limit_buckets_scope_check
  CHECK (scope IN ('key', 'tenant', 'stranger', 'webhook_address', 'webhook_provider', 'health'));

-- Down Migration
DELETE FROM rate_limit_buckets WHERE scope NOT IN ('key', 'tenant');
ALTER TABLE rate_limit_buckets DROP CONSTRAINT rate_limit_buckets_scope_check;
ALTER TABLE rate_limit_buckets ADD CONSTRAINT rate_limit_buckets_scope_check CHECK (scope IN ('key', 'tenant'));
