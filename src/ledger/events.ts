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

/** The columns of an EventRow (the table has more: the event stream's xact_id). */
const eventColumns = 'seq, id, tenant, type, object_type, object_id, object_sequence, data, created_at';

export async function readEvent(pool: LedgerPool, tenant: string, id: string): Promise<EventRow | null> {
  const { rows } = await pool.query<EventRow>(`SELECT ${eventColumns} FROM events WHERE id = $1 AND tenant = $2`, [id, tenant]);
  return rows[0] ?? null;
}

/** The events of one object, oldest first (its sequence order). */
export async function readObjectEvents(pool: LedgerPool, tenant: string, objectId: string): Promise<EventRow[]> {
  const { rows } = await pool.query<EventRow>(
    `SELECT ${eventColumns} FROM events WHERE tenant = $1 AND object_id = $2 ORDER BY object_sequence`,
    [tenant, objectId],
  );
  return rows;
}

export interface EventPageQuery {
  /**
   * An exact type (`charge.succeeded`), or every type of one object: `object` and its `types`
   * (`charge.*`); null: all.
   */
  type: string | { object: string; types: readonly string[] } | null;
  objectId: string | null;
  /** Only events about objects of these types (what the reader may see); null: every type. */
  objectTypes: readonly string[] | null;
  limit: number;
  /** An event id of this tenant, already known to exist (findEventCursor). */
  cursor: { direction: 'after' | 'before'; eventId: string } | null;
}

/**
 * A tenant's events newest first (by seq), one page, as Stripe's lists page. A type filter is served
 * by events_by_type (tenant, type, seq): a page of a rare type reads its own rows, not every event of
 * the tenant back to the last one of that type (migration 1763800000351).
 */
export async function listEventPage(pool: LedgerPool, tenant: string, query: EventPageQuery): Promise<{ events: EventRow[]; hasMore: boolean }> {
  const conditions = ['tenant = $1'];
  const params: unknown[] = [tenant];
  const param = (value: unknown): string => `$${params.push(value)}`;
  if (typeof query.type === 'string') {
    conditions.push(`type = ${param(query.type)}`);
  } else if (query.type !== null) {
    conditions.push(`object_type = ${param(query.type.object)}`);
    // An object with one type (deposit.*): asked as that type, so that events_by_type serves it in
    // seq order. With several (charge.*: most of a tenant's events) events_by_tenant is as good.
    if (query.type.types.length === 1) conditions.push(`type = ${param(query.type.types[0])}`);
  }
  if (query.objectId !== null) conditions.push(`object_id = ${param(query.objectId)}`);
  if (query.objectTypes !== null) conditions.push(`object_type = ANY(${param(query.objectTypes)}::text[])`);
  let cursor = null;
  if (query.cursor) {
    cursor = { direction: query.cursor.direction, row: `(SELECT seq FROM events WHERE tenant = $1 AND id = ${param(query.cursor.eventId)})` };
  }
  const { rows, hasMore } = await keysetPage<EventRow>(pool, {
    from: 'events',
    columns: eventColumns,
    orderBy: ['seq'],
    newestFirst: true,
    conditions,
    params,
    cursor,
    limit: query.limit,
  });
  return { events: rows, hasMore };
}
