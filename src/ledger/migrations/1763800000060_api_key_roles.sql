-- Up Migration

-- Roles: an `agent` key moves money that exists (charges, refunds, reads); an `admin` key also
-- creates money (opens accounts, sets allow_overdraft, deposits) and manages keys.
--
-- Keys that exist before this migration become `agent` keys. Until now every key could open
-- overdraft accounts and deposit any amount, which is the hole roles close; promoting every
-- existing key to admin would keep that hole open in every deployment that upgrades. Nothing is
-- lost: the operator's command line (`chargeguard accounts create | deposit`, which works with
-- database access, not with a key) still opens and funds accounts, and a deployment whose
-- integration opens accounts over HTTP creates an admin key for it
-- (`chargeguard api-keys create --role admin`) and revokes the old one.
ALTER TABLE api_keys
  ADD COLUMN role text NOT NULL DEFAULT 'agent' CHECK (role IN ('agent', 'admin')),
  -- When the key last authenticated a request, to the minute: written at most once a minute per
  -- key, so a busy key costs no write per request.
  ADD COLUMN last_used_at timestamptz;

-- Down Migration
ALTER TABLE api_keys DROP COLUMN last_used_at, DROP COLUMN role;
