import type pg from 'pg';
import { forEachKeysetBatch, keysetBatchRowsDefault, keysetPredicate, type KeysetDriver, type Queryable } from './keyset.js';
import type { LedgerPool } from './pool.js';

/** One ledger invariant (docs/contract.md, Ledger) and how many rows break it (0 when it holds). */
export interface InvariantCheck {
  name: string;
  description: string;
  violations: number;
  /** A few offending rows, for the on-call engineer. */
  samples: unknown[];
}

/**
 * One invariant as keyset batches over its driving table (src/ledger/keyset.ts): `sql` gets the
 * predicate selecting one batch of the driver's rows (aliased `alias`) and returns one row per
 * violation in it; $1 is the tenant, or null for all tenants. Whatever else a row needs is looked up
 * through an index, row by row, so no plan depends on the tables' statistics.
 */
export interface BatchedCheck {
  name: string;
  description: string;
  driver: KeysetDriver;
  alias: string;
  /** `batch` selects the batch's rows of `alias`; `over` the same key range of another table's columns. */
  sql: (batch: string, over: (columns: readonly (string | { column: string; literal: string })[]) => string) => string;
  /**
   * For a check over the whole batch (a sum) rather than row by row: folds each batch's one row
   * into a running state, and says at the end which violations there are.
   */
  fold?: { initial: () => unknown; add: (state: unknown, row: Record<string, unknown>) => unknown; violations: (state: unknown) => unknown[] };
  /** A check of its own shape (several walks), run instead of `sql`; it returns its violations. */
  run?: (db: Queryable, tenant: string | null, batchRows: number) => Promise<unknown[]>;
}

const accountKey = (tenant: unknown, id: unknown): string => `${String(tenant)}\u0000${String(id)}`;

/**
 * Walks every account in key order with its balance (its row plus postings not yet folded into
 * it), and yields the ones whose balance differs from `expected` (0 when absent).
 */
async function accountsDiffering(
  db: Queryable,
  tenant: string | null,
  batchRows: number,
  column: 'posted' | 'pending',
  expected: Map<string, bigint>,
  sample: (row: Record<string, unknown>, want: bigint) => unknown,
): Promise<unknown[]> {
  const found: unknown[] = [];
  await forEachKeysetBatch(db, drivers.accounts, { tenant, batchRows }, async (range) => {
    const batch = keysetPredicate(drivers.accounts, 'a', range, 2);
    const { rows } = await db.query<Record<string, unknown>>(
      `SELECT a.tenant, a.id, (a.${column}_minor + p.delta_minor)::text AS balance_minor
         FROM accounts a
         CROSS JOIN LATERAL (SELECT coalesce(sum(q.${column}_delta_minor), 0) AS delta_minor FROM pending_postings q
                              WHERE q.tenant = a.tenant AND q.account_id = a.id) p
        WHERE ${batch.sql} AND ($1::text IS NULL OR a.tenant = $1)`,
      [tenant, ...batch.params],
    );
    for (const row of rows) {
      const want = expected.get(accountKey(row['tenant'], row['id'])) ?? 0n;
      if (BigInt(row['balance_minor'] as string) !== want) found.push(sample(row, want));
    }
  });
  return found;
}

const sampleLimit = 5;

export const drivers = {
  transfers: { table: 'transfers', key: [{ column: 'id', type: 'bigint' }], tenantLeading: false },
  journalEntries: { table: 'journal_entries', key: [{ column: 'id', type: 'bigint' }], tenantLeading: false },
  accounts: { table: 'accounts', key: [{ column: 'tenant', type: 'text' }, { column: 'id', type: 'text' }], tenantLeading: true },
  charges: { table: 'charges', key: [{ column: 'tenant', type: 'text' }, { column: 'idempotency_key', type: 'text' }], tenantLeading: true },
  refunds: {
    table: 'refunds',
    key: [{ column: 'tenant', type: 'text' }, { column: 'charge_key', type: 'text' }, { column: 'refund_key', type: 'text' }],
    tenantLeading: true,
  },
  events: { table: 'events', key: [{ column: 'seq', type: 'bigint' }], tenantLeading: false },
  pendingPostings: {
    table: 'pending_postings',
    key: [{ column: 'tenant', type: 'text' }, { column: 'account_id', type: 'text' }, { column: 'entry_id', type: 'bigint' }],
    tenantLeading: true,
  },
} as const satisfies Record<string, KeysetDriver>;

const invariantQueries: BatchedCheck[] = [
  {
    name: 'transfer_balanced',
    description: 'every transfer has entries and they sum to zero',
    driver: drivers.transfers,
    alias: 't',
    // Both sides restricted to the batch's key range (the entries by their transfer_id index), so
    // however they are joined, neither is read beyond the batch.
    sql: (batch, over) => `WITH j AS MATERIALIZED (
              SELECT e.transfer_id, sum(e.amount_minor) AS sum_minor, count(*) AS entries
                FROM journal_entries e WHERE ${over(['e.transfer_id'])} GROUP BY e.transfer_id)
          SELECT t.id AS transfer_id, coalesce(j.sum_minor, 0) AS sum_minor, coalesce(j.entries, 0) AS entries
            FROM transfers t LEFT JOIN j ON j.transfer_id = t.id
           WHERE ${batch} AND ($1::text IS NULL OR t.tenant = $1) AND (coalesce(j.entries, 0) < 2 OR coalesce(j.sum_minor, 0) <> 0)`,
  },
  {
    name: 'journal_balanced',
    description: 'the whole journal sums to zero',
    driver: drivers.journalEntries,
    alias: 'e',
    sql: (batch) => `SELECT coalesce(sum(e.amount_minor), 0)::text AS sum_minor FROM journal_entries e
           WHERE ${batch} AND ($1::text IS NULL OR e.tenant = $1)`,
    fold: {
      initial: () => 0n,
      add: (state, row) => (state as bigint) + BigInt(row['sum_minor'] as string),
      violations: (state) => ((state as bigint) === 0n ? [] : [{ sum_minor: String(state as bigint) }]),
    },
  },
  {
    name: 'posted_matches_journal',
    description: "each account's posted balance (its row plus postings not yet folded into it) equals the sum of its journal entries",
    driver: drivers.accounts,
    alias: 'a',
    sql: () => '',
    // The journal summed by account a batch of entries at a time (a system account holds a large
    // share of the journal: summed through its index in one statement it was the slowest of all),
    // then every account's balance compared with its sum.
    run: async (db, tenant, batchRows) => {
      const sums = new Map<string, bigint>();
      await forEachKeysetBatch(db, drivers.journalEntries, { tenant: null, batchRows }, async (range) => {
        const batch = keysetPredicate(drivers.journalEntries, 'e', range, 2);
        const { rows } = await db.query<{ tenant: string; account_id: string; sum_minor: string }>(
          `SELECT e.tenant, e.account_id, sum(e.amount_minor)::text AS sum_minor FROM journal_entries e
            WHERE ${batch.sql} AND ($1::text IS NULL OR e.tenant = $1) GROUP BY e.tenant, e.account_id`,
          [tenant, ...batch.params],
        );
        for (const row of rows) {
          const key = accountKey(row.tenant, row.account_id);
          sums.set(key, (sums.get(key) ?? 0n) + BigInt(row.sum_minor));
        }
      });
      return accountsDiffering(db, tenant, batchRows, 'posted', sums, (row, want) => ({
        tenant: row['tenant'],
        id: row['id'],
        posted_minor: row['balance_minor'],
        journal_minor: String(want),
      }));
    },
  },
  {
    name: 'pending_matches_holds',
    description: "each account's pending balance (its row plus postings not yet folded into it) equals the sum of its TRIED holds",
    driver: drivers.accounts,
    alias: 'a',
    sql: () => '',
    // The open holds are read through the charges_open_holds partial index (only TRIED rows: as
    // many as the open-hold limits allow, not the ledger's history), then every account compared.
    run: async (db, tenant, batchRows) => {
      const held = new Map<string, bigint>();
      const { rows } = await db.query<{ tenant: string; payer_account_id: string; held_minor: string }>(
        `SELECT c.tenant, c.payer_account_id, sum(c.held_minor)::text AS held_minor FROM charges c
          WHERE c.hold_state = 'TRIED' AND ($1::text IS NULL OR c.tenant = $1) GROUP BY c.tenant, c.payer_account_id`,
        [tenant],
      );
      for (const row of rows) held.set(accountKey(row.tenant, row.payer_account_id), BigInt(row.held_minor));
      return accountsDiffering(db, tenant, batchRows, 'pending', held, (row, want) => ({
        tenant: row['tenant'],
        id: row['id'],
        pending_minor: row['balance_minor'],
        holds_minor: String(want),
      }));
    },
  },
  {
    name: 'pending_postings_mirror_journal',
    description:
      "every posting waiting to be folded into its account mirrors one journal entry of that account: its amount, and for a payer's capture the release of the whole hold",
    driver: drivers.pendingPostings,
    alias: 'p',
    sql: (batch) => `SELECT p.tenant, p.account_id, p.entry_id, p.posted_delta_minor, p.pending_delta_minor,
                 e.account_id AS entry_account_id, e.amount_minor AS entry_minor, c.amount_minor AS held_minor
            FROM pending_postings p
            LEFT JOIN LATERAL (SELECT * FROM journal_entries e WHERE e.id = p.entry_id LIMIT 1) e ON true
            LEFT JOIN LATERAL (SELECT * FROM transfers t WHERE t.id = e.transfer_id LIMIT 1) t ON true
            LEFT JOIN LATERAL (SELECT * FROM charges c WHERE t.kind = 'capture' AND c.tenant = t.tenant AND c.idempotency_key = t.reference LIMIT 1) c ON true
           WHERE ${batch} AND ($1::text IS NULL OR p.tenant = $1)
             AND (e.id IS NULL OR e.tenant <> p.tenant OR e.account_id <> p.account_id
                  OR e.amount_minor <> p.posted_delta_minor
                  OR (e.amount_minor < 0 AND (c.idempotency_key IS NULL OR p.pending_delta_minor <> -c.amount_minor))
                  OR (e.amount_minor > 0 AND p.pending_delta_minor <> 0))`,
  },
  {
    name: 'available_non_negative',
    // On the row itself (postings not yet folded left out, which only ever add to what is
    // available): stricter than the contract, and what the accounts CHECK enforces.
    description: 'no account without overdraft has negative available balance',
    driver: drivers.accounts,
    alias: 'a',
    sql: (batch) => `SELECT a.tenant, a.id, a.posted_minor, a.pending_minor FROM accounts a
           WHERE ${batch} AND ($1::text IS NULL OR a.tenant = $1) AND NOT a.allow_overdraft AND a.posted_minor - a.pending_minor < 0`,
  },
  {
    name: 'one_debit_per_key',
    description: 'each confirmed charge has exactly one capture transfer of its captured amount; no other charge has one',
    driver: drivers.charges,
    alias: 'c',
    // The capture transfers of a charge are found through transfers' unique (tenant, kind, reference).
    // The batch's capture transfers are the same key range of transfers' unique (tenant, kind,
    // reference) index with kind 'capture': both sides bounded by the batch.
    sql: (batch, over) => `WITH t AS MATERIALIZED (
              SELECT t.tenant, t.reference, count(*) AS captures, sum(t.amount_minor) AS captured_in_journal_minor
                FROM transfers t
               WHERE t.kind = 'capture' AND ${over(['t.tenant', { column: 't.kind', literal: "'capture'" }, 't.reference'])}
               GROUP BY t.tenant, t.reference)
          SELECT c.tenant, c.idempotency_key, c.hold_state, c.captured_minor, coalesce(t.captures, 0) AS captures,
                 coalesce(t.captured_in_journal_minor, 0) AS captured_in_journal_minor
            FROM charges c LEFT JOIN t ON t.tenant = c.tenant AND t.reference = c.idempotency_key
           WHERE ${batch} AND ($1::text IS NULL OR c.tenant = $1)
             AND ((c.hold_state = 'CONFIRMED' AND (coalesce(t.captures, 0) <> 1 OR coalesce(t.captured_in_journal_minor, 0) <> c.captured_minor))
               OR (c.hold_state <> 'CONFIRMED' AND coalesce(t.captures, 0) <> 0))`,
  },
  {
    name: 'captures_have_charges',
    description: 'every capture transfer belongs to a charge',
    driver: drivers.transfers,
    alias: 't',
    sql: (batch) => `SELECT t.id, t.tenant, t.reference FROM transfers t
            LEFT JOIN LATERAL (SELECT true AS found FROM charges c WHERE c.tenant = t.tenant AND c.idempotency_key = t.reference LIMIT 1) c ON true
           WHERE ${batch} AND ($1::text IS NULL OR t.tenant = $1) AND t.kind = 'capture' AND c.found IS NULL`,
  },
  {
    name: 'refunds_within_capture',
    description: "each charge's refunded amount is the sum of its succeeded refunds and never exceeds its capture",
    driver: drivers.charges,
    alias: 'c',
    // The batch's refunds are the same key range of refunds' primary key (tenant, charge_key, …).
    sql: (batch, over) => `WITH r AS MATERIALIZED (
              SELECT r.tenant, r.charge_key, sum(r.amount_minor) AS sum_minor
                FROM refunds r WHERE r.status = 'succeeded' AND ${over(['r.tenant', 'r.charge_key'])} GROUP BY r.tenant, r.charge_key)
          SELECT c.tenant, c.idempotency_key, c.captured_minor, c.refunded_minor, coalesce(r.sum_minor, 0) AS refunds_minor
            FROM charges c LEFT JOIN r ON r.tenant = c.tenant AND r.charge_key = c.idempotency_key
           WHERE ${batch} AND ($1::text IS NULL OR c.tenant = $1)
             AND (c.refunded_minor <> coalesce(r.sum_minor, 0) OR c.refunded_minor > c.captured_minor)`,
  },
  {
    name: 'one_transfer_per_refund',
    description: 'each succeeded refund has its one transfer (reference <charge key>/<refund key>), moving its amount from payee to payer',
    driver: drivers.refunds,
    alias: 'r',
    sql: (batch) => `SELECT r.tenant, r.charge_key, r.refund_key, r.amount_minor, t.id AS transfer_id, t.kind, t.reference,
                 t.amount_minor AS transfer_minor
            FROM refunds r
            CROSS JOIN LATERAL (SELECT c.payer_account_id, c.payee_account_id FROM charges c
                                 WHERE c.tenant = r.tenant AND c.idempotency_key = r.charge_key LIMIT 1) c
            LEFT JOIN LATERAL (SELECT * FROM transfers t WHERE t.id = r.transfer_id LIMIT 1) t ON true
            LEFT JOIN LATERAL (SELECT count(*) AS entries,
                                      count(*) FILTER (WHERE e.account_id = c.payee_account_id AND e.amount_minor = -r.amount_minor) AS from_payee,
                                      count(*) FILTER (WHERE e.account_id = c.payer_account_id AND e.amount_minor = r.amount_minor) AS to_payer
                                 FROM journal_entries e WHERE e.transfer_id = t.id) e ON true
           WHERE ${batch} AND ($1::text IS NULL OR r.tenant = $1) AND r.status = 'succeeded'
             AND (t.id IS NULL OR t.kind <> 'refund' OR t.tenant <> r.tenant
                  OR t.reference <> ledger_refund_reference(r.charge_key, r.refund_key)
                  OR t.amount_minor <> r.amount_minor
                  OR e.entries <> 2 OR e.from_payee = 0 OR e.to_payer = 0)`,
  },
  {
    name: 'refund_transfers_have_refunds',
    description: 'every refund transfer belongs to a succeeded refund',
    driver: drivers.transfers,
    alias: 't',
    sql: (batch) => `SELECT t.id, t.tenant, t.reference, t.amount_minor FROM transfers t
            LEFT JOIN LATERAL (SELECT true AS found FROM refunds r WHERE r.transfer_id = t.id AND r.status = 'succeeded' LIMIT 1) r ON true
           WHERE ${batch} AND ($1::text IS NULL OR t.tenant = $1) AND t.kind = 'refund' AND r.found IS NULL`,
  },
  // The outbox (docs/events.md) against the ledger: the triggers write an event in the transaction of
  // each change, so in any snapshot a charge's last event names the status it stands in.
  {
    name: 'outbox_decisions_have_events',
    description:
      "each charge whose status is an event's (reserved, requires_action, succeeded, declined, cancelled; a refunded one: succeeded) has that event as its last",
    driver: drivers.charges,
    alias: 'c',
    sql: (batch) => `SELECT c.tenant, c.idempotency_key, c.id, s.status, e.type AS last_event, e.object_sequence
            FROM charges c
            CROSS JOIN LATERAL (SELECT ledger_charge_status(c.hold_state, c.captured_minor, c.refunded_minor, c.provider_state) AS status) s
            LEFT JOIN LATERAL (SELECT e.type, e.object_sequence FROM events e
                                WHERE e.tenant = c.tenant AND e.object_id = c.id AND e.object_type = 'charge'
                                ORDER BY e.object_sequence DESC LIMIT 1) e ON true
           WHERE ${batch} AND ($1::text IS NULL OR c.tenant = $1) AND s.status <> 'cancelling'
             AND e.type IS DISTINCT FROM 'charge.' || CASE WHEN s.status IN ('partially_refunded', 'refunded') THEN 'succeeded' ELSE s.status END`,
  },
  {
    name: 'outbox_events_have_objects',
    description:
      "every event's object exists in its tenant (a charge, a refund, a deposit), and its type is one of that object's; " +
      'a webhook endpoint\'s events report configuration, not money, and outlive the endpoint when it is deleted',
    driver: drivers.events,
    alias: 'v',
    sql: (batch) => `SELECT v.seq, v.id, v.tenant, v.type, v.object_type, v.object_id
            FROM events v
            LEFT JOIN LATERAL (SELECT true AS found FROM charges c WHERE v.object_type = 'charge' AND c.id = v.object_id AND c.tenant = v.tenant LIMIT 1) c ON true
            LEFT JOIN LATERAL (SELECT true AS found FROM refunds r WHERE v.object_type = 'refund' AND r.id = v.object_id AND r.tenant = v.tenant LIMIT 1) r ON true
            LEFT JOIN LATERAL (SELECT true AS found FROM transfers t
                                WHERE v.object_type = 'deposit' AND v.object_id ~ '^dep_[0-9]{1,18}$'
                                  AND t.id = substr(v.object_id, 5)::bigint AND t.tenant = v.tenant AND t.kind = 'deposit' LIMIT 1) t ON true
           WHERE ${batch} AND ($1::text IS NULL OR v.tenant = $1)
             AND NOT (v.object_type = 'webhook_endpoint' AND v.type = 'webhook_endpoint.disabled' AND v.object_id ~ '^we_[A-Za-z0-9]{24}$')
             AND (coalesce(c.found, r.found, t.found) IS NULL OR split_part(v.type, '.', 1) <> v.object_type)`,
  },
  {
    name: 'outbox_sequences_gapless',
    description: "each object's events are numbered 1, 2, 3 … without a gap (each event after the first has its predecessor)",
    driver: drivers.events,
    alias: 'v',
    sql: (batch) => `SELECT v.seq, v.id, v.tenant, v.object_type, v.object_id, v.object_sequence
            FROM events v
            LEFT JOIN LATERAL (SELECT true AS found FROM events p
                                WHERE p.tenant = v.tenant AND p.object_type = v.object_type AND p.object_id = v.object_id
                                  AND p.object_sequence = v.object_sequence - 1 LIMIT 1) p ON true
           WHERE ${batch} AND ($1::text IS NULL OR v.tenant = $1) AND v.object_sequence > 1 AND p.found IS NULL`,
  },
];

/** How a run of batched checks is bounded: rows per statement, and how long one statement may take. */
export interface BatchedCheckLimits {
  /** Driving rows per statement (default keysetBatchRowsDefault). */
  batchRows?: number;
  /** Each statement's limit, in ms (SET LOCAL statement_timeout); unset keeps the connection's. */
  statementTimeoutMs?: number;
}

/**
 * A check's statement ran past its limit: the error names the check and the limit, so the operator
 * knows what to raise (or which check to look at), and that the ledger was not found wrong.
 */
export class CheckTimeoutError extends Error {
  constructor(
    readonly check: string,
    readonly statementTimeoutMs: number | null,
    cause: unknown,
  ) {
    super(
      `check ${check} ran out of time: one of its statements ran past ${statementTimeoutMs === null ? "the connection's statement_timeout" : `${statementTimeoutMs} ms`} ` +
        `(${(cause as Error).message}); nothing was found wrong by it, it did not finish`,
      { cause },
    );
    this.name = 'CheckTimeoutError';
  }
}

/** PostgreSQL's query_canceled: statement_timeout (or a cancel request). */
export function isStatementTimeout(error: unknown): boolean {
  return (error as { code?: unknown }).code === '57014';
}

/** Runs one batched check on `db` (a client in the caller's transaction), with its time named on failure. */
export async function runBatchedCheck(
  db: Queryable,
  check: BatchedCheck,
  tenant: string | null,
  limits: BatchedCheckLimits = {},
): Promise<InvariantCheck & { durationMs: number }> {
  const started = performance.now();
  let violations = 0;
  const samples: unknown[] = [];
  let state = check.fold?.initial();
  try {
    if (check.run) {
      const found = await check.run(db, tenant, limits.batchRows ?? keysetBatchRowsDefault);
      return { name: check.name, description: check.description, violations: found.length, samples: found.slice(0, sampleLimit), durationMs: Math.round(performance.now() - started) };
    }
    await forEachKeysetBatch(db, check.driver, { tenant, batchRows: limits.batchRows ?? keysetBatchRowsDefault }, async (range) => {
      const batch = keysetPredicate(check.driver, check.alias, range, 2);
      const over = (columns: readonly (string | { column: string; literal: string })[]): string => keysetPredicate(check.driver, check.alias, range, 2, columns).sql;
      const result = await db.query<Record<string, unknown>>(check.sql(batch.sql, over), [tenant, ...batch.params]);
      if (check.fold) {
        for (const row of result.rows) state = check.fold.add(state, row);
        return;
      }
      violations += result.rows.length;
      for (const row of result.rows) if (samples.length < sampleLimit) samples.push(row);
    });
  } catch (error) {
    if (isStatementTimeout(error)) throw new CheckTimeoutError(check.name, limits.statementTimeoutMs ?? null, error);
    throw error;
  }
  if (check.fold) {
    const found = check.fold.violations(state);
    violations = found.length;
    samples.push(...found.slice(0, sampleLimit));
  }
  return { name: check.name, description: check.description, violations, samples, durationMs: Math.round(performance.now() - started) };
}

/**
 * Runs batched checks in one repeatable-read, read-only snapshot (concurrent writes cannot fake a
 * violation, and every batch sees the same ledger), each statement under `statementTimeoutMs`.
 */
export async function runBatchedChecks(
  pool: LedgerPool,
  checks: readonly BatchedCheck[],
  tenant: string | null,
  limits: BatchedCheckLimits = {},
): Promise<(InvariantCheck & { durationMs: number })[]> {
  return inSnapshot(pool, limits, async (client) => {
    const results = [];
    for (const check of checks) results.push(await runBatchedCheck(client, check, tenant, limits));
    return results;
  });
}

/** Runs `work` on one client in a repeatable-read, read-only transaction, each statement under the limit. */
export async function inSnapshot<T>(pool: LedgerPool, limits: BatchedCheckLimits, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  // A connection whose ROLLBACK failed is in an unknown state: destroyed, never returned to the pool.
  let broken: Error | undefined;
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    // A batch joins two sets bounded by the batch (a range of each table's index). With statistics
    // of a far smaller ledger (analyzed early, then a crash) the planner expected one row on each
    // side and joined them in a nested loop over the materialized side: 20,000 x 20,000 comparisons,
    // 30 s a batch. Without nested loops such a join is a hash or merge join, linear in the batch;
    // a LATERAL lookup by index has no other plan and keeps its nested loop.
    await client.query(`SELECT set_config('enable_nestloop', 'off', true)`);
    if (limits.statementTimeoutMs !== undefined) {
      await client.query(`SELECT set_config('statement_timeout', $1, true)`, [`${limits.statementTimeoutMs}ms`]);
    }
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch((rollbackError: unknown) => {
      broken = rollbackError as Error;
    });
    throw error;
  } finally {
    client.release(broken);
  }
}

/** Runs every ledger invariant in one repeatable-read snapshot, so concurrent writes cannot fake a violation. */
export async function checkLedgerInvariants(pool: LedgerPool, tenant: string | null = null, limits: BatchedCheckLimits = {}): Promise<InvariantCheck[]> {
  return runBatchedChecks(pool, invariantQueries, tenant, limits);
}

/** The invariants, for a caller that runs them in its own snapshot (reconcile). */
export const ledgerInvariantChecks: readonly BatchedCheck[] = invariantQueries;
