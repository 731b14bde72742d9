import type { Queryable } from './keyset.js';

/**
 * A whole-ledger check whose rows depend on the rows before them in an index's order (a rolling
 * window over each key's charges) reads the table once, through a cursor: one statement plans the
 * walk, and each FETCH of `batchRows` rows is a statement of its own, its time bounded by the batch
 * as a keyset batch's is. Keyset batches of such a check had to read the window's look-back again
 * for every batch; the cursor carries the window from one batch to the next instead.
 *
 * The walk is planned with sequential scans, bitmap scans and sorts turned off for that one
 * statement (then set back): the only plan left that yields the rows in the index's order is the
 * index's own scan, whatever statistics the planner has (none after a crash, those of a far
 * smaller ledger after a bulk load). `sql` must therefore ask for that order (ORDER BY the
 * index's columns, with its predicate when it is partial).
 *
 * It runs in the caller's transaction (reconcile's snapshot), which a cursor needs; the cursor is
 * closed at the end, and with the transaction if a statement fails.
 */
export interface OrderedWalk {
  /** The cursor's name: an SQL identifier, unique among the cursors open in the transaction. */
  cursor: string;
  sql: string;
  params: readonly unknown[];
  /** Rows per FETCH. */
  batchRows: number;
}

const plannerSwitches = ['enable_seqscan', 'enable_bitmapscan', 'enable_sort', 'enable_incremental_sort'] as const;

export async function forEachOrderedBatch<Row extends Record<string, unknown>>(
  db: Queryable,
  walk: OrderedWalk,
  visit: (rows: Row[]) => void,
): Promise<void> {
  if (!/^[a-z_][a-z0-9_]*$/.test(walk.cursor)) throw new Error(`cursor name ${walk.cursor} is not a plain SQL identifier`);
  if (!Number.isSafeInteger(walk.batchRows) || walk.batchRows < 1) throw new RangeError(`batchRows must be a whole number of at least 1, got ${walk.batchRows}`);
  const saved = (await db.query<Record<string, string>>(`SELECT ${plannerSwitches.map((name) => `current_setting('${name}') AS ${name}`).join(', ')}`)).rows[0]!;
  await db.query(`SELECT ${plannerSwitches.map((name) => `set_config('${name}', 'off', true)`).join(', ')}`);
  await db.query(`DECLARE ${walk.cursor} NO SCROLL CURSOR FOR ${walk.sql}`, [...walk.params]);
  await db.query(
    `SELECT ${plannerSwitches.map((name, i) => `set_config('${name}', $${i + 1}, true)`).join(', ')}`,
    plannerSwitches.map((name) => saved[name]),
  );
  for (;;) {
    const { rows } = await db.query<Row>(`FETCH FORWARD ${walk.batchRows} FROM ${walk.cursor}`);
    visit(rows);
    if (rows.length < walk.batchRows) break;
  }
  await db.query(`CLOSE ${walk.cursor}`);
}
