-- Up Migration

-- A delivery's key to its event (webhook_deliveries.event_id -> events) guarded nothing that can
-- happen: events are append-only (events_append_only refuses DELETE, UPDATE and TRUNCATE), and the
-- two writers of deliveries take the event id from the events table in the same statement (the
-- fan-out trigger from the row just inserted, a requested redelivery from a read of the tenant's
-- event). Yet the key's check ran in every charge's own transaction, once per subscribed endpoint:
-- a look-up of the event just written and a FOR KEY SHARE lock on it (a WAL record of its own).
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_id_fkey;

-- Down Migration
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_event_id_fkey FOREIGN KEY (event_id) REFERENCES events (id);
