-- Up Migration

-- Signed requests (RFC 9421 HTTP Message Signatures, hmac-sha256). A key created with
-- `api-keys create --require-signature` has a signing secret and accepts only signed requests;
-- every other key has none (null) and works as before.
--
-- The secret is kept readable, unlike the key itself (only its SHA-256 is kept): HMAC is
-- symmetric, so the verifier needs the very secret the client signs with. Whoever reads this
-- table can therefore sign, but cannot make a request on their own: the bearer key, which every
-- request still carries, is stored only as a hash. A signed key is usable by someone holding both
-- the key and the secret; a leaked key (a log line, a proxy) without the secret is useless, and so
-- is a database dump without the key.
ALTER TABLE api_keys
  ADD COLUMN signing_secret text CHECK (signing_secret ~ '^cgsig_[A-Za-z0-9_-]{43}$');

-- Nonces of verified signatures, each accepted once per key. A signature is only accepted while
-- its `created` is within the allowed clock skew of the verifier's clock, so a nonce needs
-- remembering only until then (expires_at); after that a replay is refused as stale anyway, and
-- the row is deleted by a later verification (bounded batches, expired rows only; see
-- src/ledger/signature-nonces.ts). Rows go with their key.
CREATE TABLE signature_nonces (
  key_id      text        NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
  nonce       text        NOT NULL CHECK (nonce ~ '^[\x21-\x7e]{1,128}$'),
  expires_at  timestamptz NOT NULL,
  PRIMARY KEY (key_id, nonce)
);
-- The pruning scan: oldest expiries first.
CREATE INDEX signature_nonces_by_expiry ON signature_nonces (expires_at);

-- Down Migration
DROP TABLE signature_nonces;
ALTER TABLE api_keys DROP COLUMN signing_secret;
