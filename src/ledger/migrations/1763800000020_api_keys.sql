-- Up Migration

-- Per-tenant API keys. Only a SHA-256 of each key is kept: the key itself is shown once, at
-- creation. The keys are 256-bit random strings, so a fast hash is as safe as a slow one here
-- (nobody can enumerate 2^256 candidates), and it keeps the lookup a single indexed equality on
-- every request instead of a deliberately slow bcrypt comparison per request.
CREATE TABLE api_keys (
  id          text        PRIMARY KEY,
  tenant      text        NOT NULL CHECK (tenant ~ '^[a-z0-9_-]{1,64}$'),
  key_hash    text        NOT NULL UNIQUE CHECK (key_hash ~ '^[0-9a-f]{64}$'),
  -- The first characters of the key, so a person can tell their keys apart in a listing.
  key_prefix  text        NOT NULL,
  label       text,
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_at);

-- Down Migration
DROP TABLE api_keys;
