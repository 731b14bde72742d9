-- Up Migration

-- Request-rate token buckets, one row per bucket (scope 'key': an API key's id; scope 'tenant': a
-- tenant), shared by every API process on this database, so replicas share one limit. A request
-- takes its tokens in one INSERT … ON CONFLICT DO UPDATE that refills the row by the time elapsed
-- since `refilled_at` (src/ledger/rate-limits.ts); the row lock serialises concurrent takes.
-- `rate_per_second` and `burst` are the limits of the latest take (the policy may change between
-- requests: the configuration, or the key's own limits); `last_take_allowed` is that take's
-- decision, which RETURNING hands back.
-- UNLOGGED: no WAL per request. After a crash (or on a promoted standby) the table is empty and
-- every bucket starts full again, which forgives at most one burst per key and tenant: an
-- acceptable price for not writing WAL on every API request.
CREATE UNLOGGED TABLE rate_limit_buckets (
  scope             text             NOT NULL CHECK (scope IN ('key', 'tenant')),
  subject           text             NOT NULL,
  tokens            double precision NOT NULL CHECK (tokens >= 0),
  rate_per_second   double precision NOT NULL CHECK (rate_per_second > 0),
  burst             double precision NOT NULL CHECK (burst >= 1),
  refilled_at       timestamptz      NOT NULL,
  last_take_allowed boolean          NOT NULL,
  PRIMARY KEY (scope, subject)
);

-- Per-key limits (null: the configured default). The bounds match the CLI's.
ALTER TABLE api_keys
  ADD COLUMN rate_limit_per_second integer CHECK (rate_limit_per_second BETWEEN 1 AND 1000000),
  ADD COLUMN rate_limit_burst integer CHECK (rate_limit_burst BETWEEN 1 AND 1000000),
  ADD COLUMN max_open_holds integer CHECK (max_open_holds BETWEEN 1 AND 100000);

-- Open holds of one key and of one tenant (TRIED charges: manual-capture reservations and tries
-- not yet confirmed or cancelled), counted at every charge create, each count stopping at its
-- limit. Partial: only the rows holding money are in them, so they stay small.
CREATE INDEX charges_open_holds_by_key ON charges (created_by_key_id)
  WHERE hold_state = 'TRIED' AND created_by_key_id IS NOT NULL;
CREATE INDEX charges_open_holds_by_tenant ON charges (tenant) WHERE hold_state = 'TRIED';

-- Down Migration
DROP INDEX charges_open_holds_by_tenant;
DROP INDEX charges_open_holds_by_key;
ALTER TABLE api_keys DROP COLUMN max_open_holds, DROP COLUMN rate_limit_burst, DROP COLUMN rate_limit_per_second;
DROP TABLE rate_limit_buckets;
