-- Up Migration

-- The event stream's own record of what it published to Kafka (docs/queues.md, The event stream).
-- Not a cursor over events.seq: a transaction with a smaller seq may commit after one with a larger
-- seq, and a cursor past it would skip that event for good. Every event without a published row
-- here is still to publish, whenever it committed.
--   attempts      sends of this event to the topic, started; above 1, the stream may hold it twice
--                 (a publisher stopped between the broker's acknowledgement and this row's update):
--                 the count of possible duplicates, which consumers drop by the event id
--   published_at  when the broker acknowledged it (null: a send was started, not acknowledged)
CREATE TABLE event_stream_publications (
  event_id         text        NOT NULL REFERENCES events (id),
  attempts         integer     NOT NULL DEFAULT 1 CHECK (attempts >= 1),
  first_sent_at    timestamptz NOT NULL DEFAULT now(),
  last_sent_at     timestamptz NOT NULL DEFAULT now(),
  published_at     timestamptz,
  PRIMARY KEY (event_id)
);
-- The publisher's question, "what is not acknowledged yet?", answered without reading every row.
CREATE INDEX event_stream_unacknowledged ON event_stream_publications (event_id) WHERE published_at IS NULL;

-- Down Migration
DROP TABLE event_stream_publications;
