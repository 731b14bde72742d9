-- Up Migration

-- The status a caller sees, from the ledger row (src/domain/charge.ts statusOfHold is the same rule
-- for one row in TypeScript): what readers (listing, reconcile, reports) filter and count by.
-- One branch per status rather than one CASE: a filter on status keeps only its branch, whose
-- hold_state condition can use charges_by_state (tenant, hold_state, created_at); a CASE would
-- make "what is still held" scan every charge of the tenant. The branches are disjoint and cover
-- every row: a CONFIRMED charge has captured_minor >= 1 and 0 <= refunded_minor <= captured_minor
-- (CHECKs on charges). 'pending' has no row: a pending charge lives only in its workflow.
CREATE VIEW charge_statuses AS
SELECT 'reserved'::text AS status, c.* FROM charges c WHERE c.hold_state = 'TRIED'
UNION ALL
SELECT 'declined'::text, c.* FROM charges c WHERE c.hold_state = 'DECLINED'
UNION ALL
SELECT 'cancelled'::text, c.* FROM charges c WHERE c.hold_state = 'CANCELLED'
UNION ALL
SELECT 'succeeded'::text, c.* FROM charges c WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor = 0
UNION ALL
SELECT 'partially_refunded'::text, c.* FROM charges c
 WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor > 0 AND c.refunded_minor < c.captured_minor
UNION ALL
SELECT 'refunded'::text, c.* FROM charges c
 WHERE c.hold_state = 'CONFIRMED' AND c.refunded_minor > 0 AND c.refunded_minor >= c.captured_minor;

-- Down Migration
DROP VIEW charge_statuses;
