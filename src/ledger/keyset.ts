import type pg from 'pg';

/**
 * Whole-ledger checks (reconcile, the invariants) read every row of tables that grow without
 * bound, and must answer the same way right after a crash, when the planner has no statistics or
 * statistics of a ledger a hundred times smaller. So each check is a series of short statements,
 * each over one keyset batch of its driving table (rows after the last key seen, in primary-key
 * order), and everything else a batch needs is looked up row by row through a unique index or the
 * driving row's own index (LATERAL subqueries with LIMIT, which the planner cannot turn into hash
 * joins over the whole of another table). Every statement's plan is then an index range scan plus
 * index lookups whatever the statistics say, and its time is bounded by the batch size, not by
 * the ledger's size.
 */

/** Anything that runs a statement: the pool, or a client inside a transaction. */
export type Queryable = Pick<pg.PoolClient, 'query'>;

/** Driving rows per statement: large enough that the per-statement cost is small, small enough that one statement is short. */
export const keysetBatchRowsDefault = 20_000;

export interface KeysetDriver {
  /** The driving table. */
  table: string;
  /** Its primary key's columns, in the key's order, with the SQL type of each. */
  key: readonly { column: string; type: 'text' | 'bigint' }[];
  /**
   * Whether the key starts with `tenant`: a one-tenant check then walks only that tenant's range.
   * (For other keys the batches cover every tenant and the check filters: a tenant filter in the
   * batch query would let the planner trade the key's index for a scan and a sort.)
   */
  tenantLeading: boolean;
  /** A condition on the driving rows (SQL over the bare table's columns), e.g. a partial index's. */
  filter?: string;
}

/** One batch's bounds: after `after` (exclusive), up to `upTo` (inclusive; null for the last batch). */
export interface KeysetRange {
  after: readonly unknown[];
  upTo: readonly unknown[] | null;
}

/** The smallest value of each key type: every stored key is above it ('' and 0 are never keys). */
function keyFloor(type: 'text' | 'bigint'): unknown {
  return type === 'text' ? '' : 0;
}

/**
 * The predicate selecting one batch's rows of `alias`, its parameters numbered from `first`:
 * `(alias.k1, alias.k2) > ($n, $n+1) [AND (alias.k1, alias.k2) <= ($n+2, $n+3)]`.
 */
export function keysetPredicate(
  driver: KeysetDriver,
  alias: string,
  range: KeysetRange,
  first: number,
  /**
   * Other columns holding the same key (another table's, for a join restricted to the batch too),
   * in that table's index order; a `{ column, literal }` entry is a column fixed to a value between
   * them (transfers' (tenant, kind, reference) for the captures of charges' (tenant, key)).
   */
  over: readonly (string | { column: string; literal: string })[] | null = null,
): { sql: string; params: unknown[] } {
  const entries = over ?? driver.key.map((k) => `${alias}.${k.column}`);
  const columns = `(${entries.map((entry) => (typeof entry === 'string' ? entry : entry.column)).join(', ')})`;
  const placeholders = (start: number): string => {
    let next = 0;
    return `(${entries
      .map((entry) => {
        if (typeof entry !== 'string') return entry.literal;
        const k = driver.key[next]!;
        return `$${start + next++}::${k.type}`;
      })
      .join(', ')})`;
  };
  let sql = `${columns} > ${placeholders(first)}`;
  const params = [...range.after];
  if (range.upTo !== null) {
    sql += ` AND ${columns} <= ${placeholders(first + driver.key.length)}`;
    params.push(...range.upTo);
  }
  return { sql, params };
}

/**
 * Walks `driver`'s rows in key order, `batchRows` at a time, calling `visit` with each batch's
 * range; a one-tenant walk of a tenant-leading key stays inside that tenant's keys.
 */
export async function forEachKeysetBatch(
  db: Queryable,
  driver: KeysetDriver,
  options: { tenant: string | null; batchRows: number },
  visit: (range: KeysetRange) => Promise<void>,
): Promise<void> {
  // Keys travel as text (a bigint beyond 2^53 survives, which a number would round) and go back
  // with a cast; the order is the columns' own (qualified: the text aliases must not sort).
  const selected = driver.key.map((k) => `${driver.table}.${k.column}::text AS ${k.column}`).join(', ');
  const ordered = driver.key.map((k) => `${driver.table}.${k.column}`).join(', ');
  const onlyTenant = driver.tenantLeading && options.tenant !== null;
  let after: unknown[] = driver.key.map((k, i) => (i === 0 && onlyTenant ? options.tenant : keyFloor(k.type)));
  for (;;) {
    const from = keysetPredicate(driver, driver.table, { after, upTo: null }, 1);
    const tenantParam = from.params.length + 1;
    const limitParam = tenantParam + (onlyTenant ? 1 : 0);
    // The batch's last key: ORDER BY the key with a LIMIT, so the key's index is read in order.
    const { rows } = await db.query<Record<string, unknown>>(
      `SELECT ${selected} FROM ${driver.table}
        WHERE ${from.sql}${onlyTenant ? ` AND ${driver.table}.tenant = $${tenantParam}` : ''}${driver.filter ? ` AND ${driver.filter}` : ''}
        ORDER BY ${ordered} OFFSET $${limitParam}::bigint - 1 LIMIT 1`,
      [...from.params, ...(onlyTenant ? [options.tenant] : []), options.batchRows],
    );
    const last = rows[0];
    if (!last) {
      // Fewer than a batch left: the rest, to the end of the key (or the tenant's keys).
      await visit({ after, upTo: null });
      return;
    }
    const upTo = driver.key.map((k) => last[k.column]);
    if (upTo.every((value, i) => String(value) === String(after[i]))) throw new Error(`keyset over ${driver.table} made no progress at ${upTo.join(', ')}`);
    await visit({ after, upTo });
    after = upTo;
  }
}
