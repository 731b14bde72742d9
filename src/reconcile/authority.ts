import type { LedgerPool } from '../ledger/pool.js';
import type { ReconcileCheck } from './reconcile.js';

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
  /** One row per violation; $1 is the tenant, or null for all tenants. */
  sql: string;
}

const sampleLimit = 5;

export const authorityQueries: readonly AuthorityQuery[] = [
  {
    name: 'system_accounts_move_only_by_deposit',
    description:
      'every journal entry of a system account is the debit of a deposit (@external/..., its deposit or webhook record), or, on a provider clearing account (@provider/<provider>/<currency>), the debit of a capture or the credit of a refund of a provider charge of that provider and currency that the provider captured: no other charge, refund or hand edit moves money out of or into one',
    sql: `SELECT e.tenant, e.account_id, e.transfer_id, t.kind, t.reference, e.amount_minor
            FROM accounts a
            JOIN journal_entries e ON e.tenant = a.tenant AND e.account_id = a.id
            JOIN transfers t ON t.id = e.transfer_id
           WHERE a.is_system AND ($1::text IS NULL OR a.tenant = $1)
             AND NOT (t.kind = 'deposit' AND e.amount_minor < 0 AND a.id LIKE '@external/%')
             AND NOT (t.kind IN ('capture', 'refund') AND EXISTS (
                   SELECT 1 FROM charges c
                    WHERE c.tenant = e.tenant
                      AND c.idempotency_key = CASE WHEN t.kind = 'capture' THEN t.reference
                                                   ELSE (SELECT r.charge_key FROM refunds r WHERE r.transfer_id = t.id) END
                      AND c.provider IS NOT NULL AND c.provider_state = 'captured'
                      AND c.payer_account_id = a.id
                      AND a.id = '@provider/' || c.provider || '/' || c.currency
                      AND (t.kind = 'capture') = (e.amount_minor < 0)))
           ORDER BY e.transfer_id`,
  },
  {
    name: 'acting_keys_allowed_moves',
    description:
      "every charge that holds or captured money and every refund that moved money was made by a key that existed, belonged to the tenant, was an agent or admin key, neither revoked nor expired, within the contract's maximum and (charges) the key's mandate: largest charge, currency, payees, and a rolling 24 h total still standing at most its daily limit; without a key only in a tenant that had no key yet",
    // The key's rolling 24 h total is one window over the key's charges in created order (the
    // frame ends at the charge and its peers, and starts just after 24 h before it, as Try's own
    // sum): one pass, where a correlated sum per charge scanned the key's day again for every
    // charge and timed out on a long chaos run's ledger (tens of thousands of charges by few keys).
    sql: `WITH key_days AS (
            SELECT c.tenant, c.idempotency_key,
                   sum(c.held_minor + c.captured_minor) OVER (
                     PARTITION BY c.created_by_key_id ORDER BY c.created_at
                     RANGE BETWEEN interval '24 hours' - interval '1 microsecond' PRECEDING AND CURRENT ROW
                   ) AS key_day_minor
              FROM charges c
             WHERE c.created_by_key_id IS NOT NULL AND ($1::text IS NULL OR c.tenant = $1)
          ), moves AS (
            SELECT 'charge' AS move, c.tenant, c.idempotency_key AS charge_key, NULL::text AS refund_key,
                   c.created_by_key_id AS key_id, c.created_at, c.amount_minor, c.currency::text AS currency,
                   c.payee_account_id, kd.key_day_minor
              FROM charges c
              LEFT JOIN key_days kd ON kd.tenant = c.tenant AND kd.idempotency_key = c.idempotency_key
             WHERE c.hold_state IN ('TRIED', 'CONFIRMED') AND ($1::text IS NULL OR c.tenant = $1)
            UNION ALL
            SELECT 'refund', r.tenant, r.charge_key, r.refund_key, r.created_by_key_id, r.created_at, r.amount_minor,
                   r.currency::text, NULL, NULL::bigint
              FROM refunds r
             WHERE r.status = 'succeeded' AND ($1::text IS NULL OR r.tenant = $1)
          )
          SELECT m.move, m.tenant, m.charge_key, m.refund_key, m.key_id, m.amount_minor, p.problem
            FROM moves m
            LEFT JOIN api_keys k ON k.id = m.key_id
            CROSS JOIN LATERAL (SELECT CASE
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
            END AS problem) p
           WHERE p.problem IS NOT NULL
           ORDER BY m.created_at`,
  },
];

/** Runs every authority check for one tenant (or all): read-only. */
export async function checkAuthority(pool: LedgerPool, tenant: string | null): Promise<ReconcileCheck[]> {
  return Promise.all(
    authorityQueries.map(async (query) => {
      const result = await pool.query(query.sql, [tenant]);
      return {
        name: query.name,
        description: query.description,
        violations: result.rowCount ?? result.rows.length,
        samples: result.rows.slice(0, sampleLimit),
      };
    }),
  );
}
