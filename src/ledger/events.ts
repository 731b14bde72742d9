import type { LedgerPool } from './pool.js';
import { keysetPage } from './pages.js';

/**
 * A row of the events table (the transactional outbox, docs/events.md), as PostgreSQL hands it
 * over. The ledger writes these rows in the transaction of the change they report (a ledger
 * charge's steps themselves, triggers for provider charges, refunds and deposits: migrations
 * 1763800000245 and 1763800000300): no charge, refund or deposit event is written from TypeScript. `data.object` holds the
 * changed row as the ledger had it at that change (a charges or refunds row, or a deposit's
 * transfer and credited account); src/service/events.ts renders it as the API shows the object.
 */
export interface EventRow {
  /** Insertion order over all tenants: a tie-break, not a promise of commit order. */
  seq: number;
  id: string;
  tenant: string;
  type: string;
  object_type: string;
  object_id: string;
  /** 1, 2, 3 … per object, in the order the object's changes committed. */
  object_sequence: number;
  data: { object: Record<string, unknown> };
  created_at: Date;
}

export async function readEvent(pool: LedgerPool, tenant: string, id: string): Promise<EventRow | null> {
  const { rows } = await pool.query<EventRow>('SELECT * FROM events WHERE id = $1 AND tenant = $2', [id, tenant]);
  return rows[0] ?? null;
}

/** The events of one object, oldest first (its sequence order). */
export async function readObjectEvents(pool: LedgerPool, tenant: string, objectId: string): Promise<EventRow[]> {
  const { rows } = await pool.query<EventRow>(
    'SELECT * FROM events WHERE tenant = $1 AND object_id = $2 ORDER BY object_sequence',
    [tenant, objectId],
  );
  return rows;
}

export interface EventPageQuery {
  /** An exact type (`charge.succeeded`) or every type of one object (`charge.*`); null: all. */
  type: string | null;
  objectId: string | null;
  limit: number;
  /** An event id of this tenant, already known to exist (findEventCursor). */
  cursor: { direction: 'after' | 'before'; eventId: string } | null;
}

/** A tenant's events newest first (by seq), one page, as Stripe's lists page. */
export async function listEventPage(pool: LedgerPool, tenant: string, query: EventPageQuery): Promise<{ events: EventRow[]; hasMore: boolean }> {
  const conditions = ['tenant = $1'];
  const params: unknown[] = [tenant];
  if (query.type !== null) {
    if (query.type.endsWith('.*')) {
      params.push(query.type.slice(0, -2));
      conditions.push(`object_type = $${params.length}`);
    } else {
      params.push(query.type);
      conditions.push(`type = $${params.length}`);
    }
  }
  if (query.objectId !== null) {
    params.push(query.objectId);
    conditions.push(`object_id = $${params.length}`);
  }
  let cursor = null;
  if (query.cursor) {
    params.push(query.cursor.eventId);
    cursor = { direction: query.cursor.direction, row: `(SELECT seq FROM events WHERE tenant = $1 AND id = $${params.length})` };
  }
  const { rows, hasMore } = await keysetPage<EventRow>(pool, {
    from: 'events',
    orderBy: ['seq'],
    newestFirst: true,
    conditions,
    params,
    cursor,
    limit: query.limit,
  });
  return { events: rows, hasMore };
}

/** Whether the id names an event of this tenant (a list cursor must). */
export async function findEventCursor(pool: LedgerPool, tenant: string, id: string): Promise<string | null> {
  const { rows } = await pool.query<{ id: string }>('SELECT id FROM events WHERE id = $1 AND tenant = $2', [id, tenant]);
  return rows[0]?.id ?? null;
}
