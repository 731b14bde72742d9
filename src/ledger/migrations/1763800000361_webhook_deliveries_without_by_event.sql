-- Up Migration

-- webhook_deliveries_by_event indexed the deliveries by their event, and nothing reads them that
-- way: the deliverer reads by endpoint and due time (webhook_deliveries_due) and by lease
-- (webhook_deliveries_leased), an endpoint's deliveries and attempts are read by endpoint, the
-- pruner by finished time, and the one automatic delivery per event and endpoint is
-- webhook_deliveries_once (endpoint_id, event_id). Nor does the foreign key to events need it:
-- events are never deleted (the table is append-only). Yet every delivery wrote it three times:
-- the fan-out's insert in the charge's own transaction, the claim's lease and the delivered
-- update (neither can be a HOT update: each changes a column another index's predicate reads).
DROP INDEX IF EXISTS webhook_deliveries_by_event;

-- Down Migration
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);
