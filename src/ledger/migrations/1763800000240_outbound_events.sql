-- Up Migration

-- Outbound events (docs/events.md): the transactional outbox. Every change a caller acts on (a
-- charge reserved, waiting for its payer, succeeded, declined, cancelled; a refund succeeded or
-- failed; money deposited) writes one row here in the same transaction as the change, so there is
-- no change without its event and no event without its change. Deliveries to webhook endpoints and
-- the event stream read from here; a caller catches up with GET /v1/events.
--   seq              insertion order over all tenants (a tie-break for delivery and listing; not a
--                    cursor for readers of committed rows: a transaction with a smaller seq may commit
--                    after one with a larger seq)
--   id               the event's public id (`evt_` …), the consumer's deduplication key
--   type             `charge.succeeded`, `refund.failed`, … (docs/events.md lists them)
--   object_type, object_id   what the event is about, by its API object name and public id
--   object_sequence  1, 2, 3 … per object: a consumer drops an event older than one it has
--   data             `{"object": …}`: the object as the API showed it at that change
CREATE TABLE events (
  seq              bigint      GENERATED ALWAYS AS IDENTITY,
  id               text        NOT NULL CHECK (id ~ '^evt_[A-Za-z0-9]{16,64}$'),
  tenant           text        NOT NULL,
  type             text        NOT NULL CHECK (type ~ '^[a-z][a-z_]{0,31}(\.[a-z][a-z_]{0,31}){1,3}$'),
  object_type      text        NOT NULL CHECK (object_type ~ '^[a-z][a-z_]{0,31}$'),
  object_id        text        NOT NULL CHECK (object_id ~ '^[\x21-\x7e]{1,255}$'),
  object_sequence  integer     NOT NULL CHECK (object_sequence >= 1),
  data             jsonb       NOT NULL CHECK (jsonb_typeof(data) = 'object' AND data ? 'object'),
  created_at       timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (id),
  UNIQUE (seq),
  UNIQUE (tenant, object_type, object_id, object_sequence)
);
-- A tenant's events newest first (GET /v1/events) and one object's events in order.
CREATE INDEX events_by_tenant ON events (tenant, seq);
CREATE INDEX events_by_object ON events (tenant, object_id, object_sequence);

-- Down Migration
DROP TABLE events;
