import type { LedgerPool } from './pool.js';

/**
 * Keyset pagination, as every list of the API pages: a page starts after (or ends before) one
 * object of the list, named by its row, and is ordered by `(created_at, <tiebreak>)` so pages stay
 * stable while rows are inserted. A cursor is always a row of the tenant, resolved by the caller
 * first: an unknown one is the caller's error (400), never an empty page.
 */
export type PageCursor = { direction: 'after' | 'before'; row: string } | null;

export interface KeysetQuery {
  /** The table or view listed. */
  from: string;
  /** The columns each row carries; all of them (`*`) when not given. */
  columns?: string;
  /** The ordering columns, most significant first, e.g. `['created_at', 'idempotency_key']`. */
  orderBy: readonly string[];
  /** The list's own order: newest first (charges, accounts) or oldest first (a charge's refunds). */
  newestFirst: boolean;
  /** WHERE conditions that hold on every page; their parameters are `params`, numbered from $1. */
  conditions: string[];
  params: unknown[];
  /**
   * `row`: SQL selecting the cursor row's ordering columns, e.g. `(SELECT created_at, id FROM …
   * WHERE … = $3)`, using `params` (the caller pushes its value there).
   */
  cursor: PageCursor;
  /** Page size; the caller bounds it. */
  limit: number;
}

/**
 * One page in the list's order. `starting_after`: the objects after the cursor; `ending_before`:
 * the `limit` objects just before it (read backwards, handed back in the list's order), and
 * `hasMore` then says whether more lie before those, as Stripe's lists answer it.
 */
export async function keysetPage<Row extends object>(pool: LedgerPool, query: KeysetQuery): Promise<{ rows: Row[]; hasMore: boolean }> {
  const params = [...query.params];
  const forwards = query.cursor?.direction !== 'before';
  // Scanning towards older rows: a newest-first list read forwards, or an oldest-first one read backwards.
  const towardsOlder = query.newestFirst === forwards;
  const columns = `(${query.orderBy.join(', ')})`;
  const conditions = [...query.conditions];
  if (query.cursor !== null) conditions.push(`${columns} ${towardsOlder ? '<' : '>'} ${query.cursor.row}`);
  params.push(query.limit + 1);
  const order = query.orderBy.map((column) => `${column} ${towardsOlder ? 'DESC' : 'ASC'}`).join(', ');
  const result = await pool.query<Row>(
    `SELECT ${query.columns ?? '*'} FROM ${query.from} WHERE ${conditions.join(' AND ')} ORDER BY ${order} LIMIT $${params.length}`,
    params,
  );
  const rows = result.rows.slice(0, query.limit);
  return { rows: forwards ? rows : rows.reverse(), hasMore: result.rows.length > query.limit };
}
