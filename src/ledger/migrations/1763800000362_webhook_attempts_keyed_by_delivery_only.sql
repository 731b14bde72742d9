-- Up Migration

-- An attempt row referenced its endpoint twice: through its delivery (delivery_id, ON DELETE
-- CASCADE, and the delivery's endpoint_id, ON DELETE CASCADE) and directly (endpoint_id, ON DELETE
-- CASCADE). The direct key adds nothing: an attempt's endpoint_id is always its delivery's (the
-- deliverer writes it from the delivery it claimed), so deleting an endpoint deletes its deliveries
-- and with them every attempt, as before. Yet each recorded attempt paid for it: a look-up of the
-- endpoint and a FOR KEY SHARE lock on its row, the one row every attempt to that endpoint and every
-- event fanned out to it lock. endpoint_id stays, indexed, for an endpoint's list of attempts.
ALTER TABLE webhook_delivery_attempts DROP CONSTRAINT webhook_delivery_attempts_endpoint_id_fkey;

-- Down Migration
ALTER TABLE webhook_delivery_attempts ADD CONSTRAINT webhook_delivery_attempts_endpoint_id_fkey
  FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoints (id) ON DELETE CASCADE;
