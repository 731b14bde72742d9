import { CheckTimeoutError, drivers, runBatchedCheck, type BatchedCheck, type BatchedCheckLimits } from '../ledger/invariants.js';
import { forEachKeysetBatch, keysetPredicate, type KeysetDriver, type Queryable } from '../ledger/keyset.js';
import { forEachOrderedBatch } from '../ledger/ordered-cursor.js';
import type { ReconcileCheck } from './check.js';

/**
 * Who moved money, and whether they could: what the ledger's steps refuse at the time (Try and
 * Refund judge the acting key from its api_keys row; only deposits touch system accounts), checked
 * again after the fact over every row. A violation here is money a ledger bug, a hand edit or a
 * step from before those rules moved; the steps of this version refuse every one of them.
 *
 * What cannot be re-checked afterwards: that the key's holder asked (the row names a key id, never
 * proves possession); the daily limit exactly (a hold counted at the time and cancelled since no
 * longer adds up, so only totals still standing above the limit are caught); and the instant a
 * revocation, expiry or first key took effect relative to a step in flight (both are compared
 * with the step's transaction start).
 */
interface AuthorityQuery {
  name: string;
  description: string;
  /** Parts, each batched over its own driving rows; their violations add up to the check's. */
  parts: readonly BatchedCheck[];
}

const sampleLimit = 5;

/** Why a move (m) by its acting key (k, null when it has none) was not allowed, or NULL. */
const moveProblem = `CASE
              WHEN m.amount_minor > ledger_amount_minor_max() THEN 'the amount is above the contract''s maximum'
              WHEN m.key_id IS NULL THEN CASE
                WHEN EXISTS (SELECT 1 FROM api_keys o WHERE o.tenant = m.tenant AND o.created_at <= m.created_at)
                THEN 'no acting key, in a tenant that had keys' END
              WHEN k.id IS NULL THEN 'the acting key does not exist'
              WHEN k.tenant <> m.tenant THEN 'the acting key belongs to another tenant'
              WHEN k.role NOT IN ('agent', 'admin') THEN 'the acting key''s role may not move money'
              WHEN k.created_at > m.created_at THEN 'the acting key was created after the move'
              WHEN k.revoked_at <= m.created_at THEN 'the acting key was revoked before the move'
              WHEN k.expires_at <= m.created_at THEN 'the acting key had expired before the move'
              WHEN m.move <> 'charge' THEN NULL
              WHEN m.amount_minor > k.max_amount_minor THEN 'above the key''s largest charge'
              WHEN m.currency <> k.currency THEN 'not the key''s currency'
              WHEN m.payee_account_id <> ALL (k.allowed_payee_account_ids) THEN 'not one of the key''s payees'
              WHEN m.amount_minor > k.daily_limit_minor OR m.key_day_minor > k.daily_limit_minor
              THEN 'the key''s charges in the 24 h up to this one are above its daily limit'
            END`;

/** The moves (m), each with its key looked up by id (k) and why it was not allowed (p.problem, NULL when it was). */
const withProblems = (moves: string): string => `FROM (${moves}) m
            LEFT JOIN LATERAL (SELECT * FROM api_keys k WHERE k.id = m.key_id LIMIT 1) k ON true
            CROSS JOIN LATERAL (SELECT ${moveProblem} AS problem) p`;

/** The moves of one batch that were not allowed. */
const judged = (moves: string): string => `SELECT m.move, m.tenant, m.charge_key, m.refund_key, m.key_id, m.amount_minor, p.problem
            ${withProblems(moves)}
           WHERE p.problem IS NOT NULL`;

/**
 * Every charge made by a key, in the order of charges_created_by_key_recent (key, created time),
 * each with the key's rolling 24 h total up to it: a window over the key's charges (the frame ends
 * at the charge and its peers, and starts just after 24 h before it, as Try's own sum), carried
 * from row to row in one pass. One row per charge, `violation` NULL unless the charge holds or
 * captured money it was not allowed to.
 */
const chargesByKeySql = `SELECT CASE WHEN m.hold_state IN ('TRIED', 'CONFIRMED') AND p.problem IS NOT NULL
                 THEN json_build_object('move', m.move, 'tenant', m.tenant, 'charge_key', m.charge_key, 'refund_key', m.refund_key,
                                        'key_id', m.key_id, 'amount_minor', m.amount_minor::text, 'problem', p.problem) END AS violation
            ${withProblems(`SELECT 'charge' AS move, c.tenant, c.idempotency_key AS charge_key, NULL::text AS refund_key,
                   c.created_by_key_id AS key_id, c.created_at, c.amount_minor, c.currency, c.payee_account_id, c.hold_state,
                   sum(c.held_minor + c.captured_minor) OVER (
                     PARTITION BY c.created_by_key_id ORDER BY c.created_at
                     RANGE BETWEEN interval '24 hours' - interval '1 microsecond' PRECEDING AND CURRENT ROW
                   ) AS key_day_minor
              FROM charges c
             WHERE c.created_by_key_id IS NOT NULL AND ($1::text IS NULL OR c.tenant = $1)
             ORDER BY c.created_by_key_id, c.created_at`)}`;

/** Charges made without a key, through their own partial index (charges_without_key): few, and never a Try through the API. */
const chargesWithoutKey: KeysetDriver = { ...drivers.charges, filter: 'charges.created_by_key_id IS NULL' };

export const authorityQueries: readonly AuthorityQuery[] = [
  {
    name: 'system_accounts_move_only_by_deposit',
    description:
      'every journal entry of a system account is the debit of a deposit (@external/..., its deposit or webhook record), or, on a provider clearing account (@provider/<provider>/<currency>), the debit of a capture or the credit of a refund of a provider charge of that provider and currency that the provider captured: no other charge, refund or hand edit moves money out of or into one',
    // Over every journal entry, a batch at a time, the entries of system accounts (collected first:
    // there are few) picked out by a hash of them, and each one's transfer, refund and charge looked
    // up by key: a system account holds a large share of the journal (every deposit and every card
    // capture), and a join planned without statistics over it timed out after a crash.
    parts: [
      {
        name: 'system_accounts_move_only_by_deposit',
        description: '',
        driver: drivers.journalEntries,
        alias: 'e',
        sql: () => '',
        run: async (db, tenant, batchRows) => {
          const tenants: string[] = [];
          const ids: string[] = [];
          await forEachKeysetBatch(db, drivers.accounts, { tenant, batchRows }, async (range) => {
            const batch = keysetPredicate(drivers.accounts, 'a', range, 2);
            const { rows } = await db.query<{ tenant: string; id: string }>(
              `SELECT a.tenant, a.id FROM accounts a WHERE ${batch.sql} AND ($1::text IS NULL OR a.tenant = $1) AND a.is_system`,
              [tenant, ...batch.params],
            );
            for (const row of rows) {
              tenants.push(row.tenant);
              ids.push(row.id);
            }
          });
          const found: unknown[] = [];
          if (ids.length === 0) return found;
          await forEachKeysetBatch(db, drivers.journalEntries, { tenant: null, batchRows }, async (range) => {
            const batch = keysetPredicate(drivers.journalEntries, 'e', range, 4);
            const { rows } = await db.query(
              `WITH system_accounts AS MATERIALIZED (SELECT * FROM unnest($2::text[], $3::text[]) AS s(tenant, id)),
                    entries AS MATERIALIZED (
                      SELECT e.* FROM journal_entries e JOIN system_accounts s ON s.tenant = e.tenant AND s.id = e.account_id
                       WHERE ${batch.sql} AND ($1::text IS NULL OR e.tenant = $1))
               SELECT e.tenant, e.account_id, e.transfer_id, t.kind, t.reference, e.amount_minor
                 FROM entries e
                 CROSS JOIN LATERAL (SELECT t.kind, t.reference FROM transfers t WHERE t.id = e.transfer_id LIMIT 1) t
                 LEFT JOIN LATERAL (SELECT r.charge_key FROM refunds r WHERE t.kind = 'refund' AND r.transfer_id = e.transfer_id LIMIT 1) r ON true
                 LEFT JOIN LATERAL (SELECT c.provider, c.provider_state, c.payer_account_id, c.currency FROM charges c
                                     WHERE t.kind IN ('capture', 'refund') AND c.tenant = e.tenant
                                       AND c.idempotency_key = CASE WHEN t.kind = 'capture' THEN t.reference ELSE r.charge_key END
                                     LIMIT 1) c ON true
                WHERE NOT coalesce(t.kind = 'deposit' AND e.amount_minor < 0 AND e.account_id LIKE '@external/%', false)
                  AND NOT coalesce(t.kind IN ('capture', 'refund') AND c.provider IS NOT NULL AND c.provider_state = 'captured'
                                   AND c.payer_account_id = e.account_id
                                   AND e.account_id = '@provider/' || c.provider || '/' || c.currency
                                   AND (t.kind = 'capture') = (e.amount_minor < 0), false)
                ORDER BY e.id`,
              [tenant, tenants, ids, ...batch.params],
            );
            found.push(...rows);
          });
          return found;
        },
      },
    ],
  },
  {
    name: 'acting_keys_allowed_moves',
    description:
      "every charge that holds or captured money and every refund that moved money was made by a key that existed, belonged to the tenant, was an agent or admin key, neither revoked nor expired, within the contract's maximum and (charges) the key's mandate: largest charge, currency, payees, and a rolling 24 h total still standing at most its daily limit; without a key only in a tenant that had no key yet",
    parts: [
      {
        // One pass over the keys' charges in (key, created) order: keyset batches in that order
        // each read the 24 h before their first charge again for the window.
        name: 'acting_keys_allowed_moves (charges by a key)',
        description: '',
        driver: drivers.charges,
        alias: 'c',
        sql: () => '',
        run: async (db, tenant, batchRows) => {
          const found: unknown[] = [];
          await forEachOrderedBatch<{ violation: unknown }>(db, { cursor: 'acting_key_charges', sql: chargesByKeySql, params: [tenant], batchRows }, (rows) => {
            for (const row of rows) if (row.violation !== null) found.push(row.violation);
          });
          return found;
        },
      },
      {
        name: 'acting_keys_allowed_moves (charges without a key)',
        description: '',
        driver: chargesWithoutKey,
        alias: 'c',
        sql: (batch) =>
          judged(`SELECT 'charge' AS move, c.tenant, c.idempotency_key AS charge_key, NULL::text AS refund_key,
                   NULL::text AS key_id, c.created_at, c.amount_minor, c.currency::text AS currency, c.payee_account_id, NULL::numeric AS key_day_minor
              FROM charges c
             WHERE ${batch} AND ($1::text IS NULL OR c.tenant = $1)
               AND c.created_by_key_id IS NULL AND c.hold_state IN ('TRIED', 'CONFIRMED')`),
      },
      {
        name: 'acting_keys_allowed_moves (refunds)',
        description: '',
        driver: drivers.refunds,
        alias: 'r',
        sql: (batch) =>
          judged(`SELECT 'refund' AS move, r.tenant, r.charge_key, r.refund_key, r.created_by_key_id AS key_id, r.created_at,
                   r.amount_minor, r.currency::text AS currency, NULL::text AS payee_account_id, NULL::numeric AS key_day_minor
              FROM refunds r
             WHERE ${batch} AND ($1::text IS NULL OR r.tenant = $1) AND r.status = 'succeeded'`),
      },
    ],
  },
];

/** Runs every authority check for one tenant (or all) on `db` (a client in reconcile's snapshot): read-only. */
export async function checkAuthority(
  db: Queryable,
  tenant: string | null,
  limits: BatchedCheckLimits = {},
): Promise<(ReconcileCheck & { durationMs: number })[]> {
  const checks = [];
  for (const query of authorityQueries) {
    const started = performance.now();
    let violations = 0;
    const samples: unknown[] = [];
    for (const part of query.parts) {
      try {
        const result = await runBatchedCheck(db, part, tenant, limits);
        violations += result.violations;
        samples.push(...result.samples.slice(0, sampleLimit - samples.length));
      } catch (error) {
        // Named after the check the operator sees, not its part.
        if (error instanceof CheckTimeoutError) throw new CheckTimeoutError(query.name, error.statementTimeoutMs, error.cause);
        throw error;
      }
    }
    checks.push({ name: query.name, description: query.description, violations, samples, durationMs: Math.round(performance.now() - started) });
  }
  return checks;
}
