-- Up Migration

-- Request fingerprints carry their definition's version: keys recorded before it keep their bare
-- 64-hex (v1, the charge's business fields), new ones are `v2:<64-hex>` (the whole validated
-- body). Callers compare a request under the recorded fingerprint's version, so both must stay
-- storable; any later `vN:` needs no further migration.
ALTER TABLE charges DROP CONSTRAINT charges_fingerprint_check;
ALTER TABLE charges ADD CONSTRAINT charges_fingerprint_check
  CHECK (fingerprint ~ '^(v[0-9]+:)?[0-9a-f]{64}$');

ALTER TABLE refunds DROP CONSTRAINT refunds_fingerprint_check;
ALTER TABLE refunds ADD CONSTRAINT refunds_fingerprint_check
  CHECK (fingerprint ~ '^(v[0-9]+:)?[0-9a-f]{64}$');

-- Down Migration
-- NOT VALID: rows recorded with v2 fingerprints stay; only new ones are held to the old rule.
ALTER TABLE refunds DROP CONSTRAINT refunds_fingerprint_check;
ALTER TABLE refunds ADD CONSTRAINT refunds_fingerprint_check CHECK (fingerprint ~ '^[0-9a-f]{64}$') NOT VALID;
ALTER TABLE charges DROP CONSTRAINT charges_fingerprint_check;
ALTER TABLE charges ADD CONSTRAINT charges_fingerprint_check CHECK (fingerprint ~ '^[0-9a-f]{64}$') NOT VALID;
