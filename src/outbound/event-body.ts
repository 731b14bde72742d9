import type { EventRow } from '../ledger/webhook-endpoints.js';

/**
 * A delivery's body built from the stored row alone: `{id, object: "event", type, created_at, sequence,
 * data}` with `data.object` as it was written. The events API's renderer is handed to the
 * deliverer instead wherever the two could differ.
 */
export function storedEventBody(row: EventRow): Record<string, unknown> {
  return {
    id: row.id,
    object: 'event',
    type: row.type,
    created_at: row.created_at.toISOString(),
    sequence: row.object_sequence,
    data: row.data,
  };
}
