-- Up Migration

-- Retention of webhook deliveries (docs/webhook-endpoints.md, Retention): a delivery that finished
-- (delivered, or failed for good) is deleted with its attempts once it is older than the
-- deliverer's WEBHOOK_DELIVERY_RETENTION_MS (30 days by default). The pruner asks for the oldest
-- finished rows, a bounded batch at a time; this index answers that with those rows alone, however
-- many deliveries are pending or recent. Partial: a delivery is inserted unfinished (finished_at
-- null) in its event's transaction, so the charge that writes the event never touches this index;
-- only the deliverer's record of the outcome does.
--
-- IF NOT EXISTS: migrations run in a transaction, so this build holds writes to webhook_deliveries
-- (every event's fan-out) for its duration. On a large ledger the operator can build it first
-- without that pause, `CREATE INDEX CONCURRENTLY webhook_deliveries_finished ON webhook_deliveries
-- (finished_at, id) WHERE finished_at IS NOT NULL;`, and this finds it made.
CREATE INDEX IF NOT EXISTS webhook_deliveries_finished ON webhook_deliveries (finished_at, id) WHERE finished_at IS NOT NULL;

-- Down Migration
DROP INDEX webhook_deliveries_finished;
