-- A new event's public id: `evt_` and 32 hex digits of a version 4 UUID (122 random bits), made
-- where the event is written, so an id exists only for an event that committed.

CREATE OR REPLACE FUNCTION ledger_event_id() RETURNS text LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT 'evt_' || replace(gen_random_uuid()::text, '-', '')
$$;
