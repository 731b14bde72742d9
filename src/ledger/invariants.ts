import type { LedgerPool } from './pool.js';

/** One ledger invariant (docs/contract.md, Ledger) and how many rows break it (0 when it holds). */
export interface InvariantCheck {
  name: string;
  description: string;
  violations: number;
  /** A few offending rows, for the on-call engineer. */
  samples: unknown[];
}

interface InvariantQuery {
  name: string;
  description: string;
  /** Returns one row per violation; $1 is the tenant, or null for all tenants. */
  sql: string;
}

const sampleLimit = 5;

const invariantQueries: InvariantQuery[] = [
  {
    name: 'transfer_balanced',
    description: 'every transfer has entries and they sum to zero',
    sql: `SELECT t.id AS transfer_id, coalesce(sum(e.amount_minor), 0) AS sum_minor, count(e.id) AS entries
            FROM transfers t LEFT JOIN journal_entries e ON e.transfer_id = t.id
           WHERE ($1::text IS NULL OR t.tenant = $1)
           GROUP BY t.id HAVING count(e.id) < 2 OR coalesce(sum(e.amount_minor), 0) <> 0`,
  },
  {
    name: 'journal_balanced',
    description: 'the whole journal sums to zero',
    sql: `SELECT sum(amount_minor) AS sum_minor FROM journal_entries
           WHERE ($1::text IS NULL OR tenant = $1) HAVING coalesce(sum(amount_minor), 0) <> 0`,
  },
  {
    name: 'posted_matches_journal',
    description: "each account's posted balance (its row plus postings not yet folded into it) equals the sum of its journal entries",
    sql: `SELECT a.tenant, a.id, a.posted_minor, coalesce(j.sum_minor, 0) AS journal_minor
            FROM account_balances a
            LEFT JOIN (SELECT tenant, account_id, sum(amount_minor) AS sum_minor FROM journal_entries
                        GROUP BY tenant, account_id) j ON j.tenant = a.tenant AND j.account_id = a.id
           WHERE ($1::text IS NULL OR a.tenant = $1) AND a.posted_minor <> coalesce(j.sum_minor, 0)`,
  },
  {
    name: 'pending_matches_holds',
    description: "each account's pending balance (its row plus postings not yet folded into it) equals the sum of its TRIED holds",
    sql: `SELECT a.tenant, a.id, a.pending_minor, coalesce(h.held_minor, 0) AS holds_minor
            FROM account_balances a
            LEFT JOIN (SELECT tenant, payer_account_id, sum(held_minor) AS held_minor FROM charges
                        WHERE hold_state = 'TRIED' GROUP BY tenant, payer_account_id) h
              ON h.tenant = a.tenant AND h.payer_account_id = a.id
           WHERE ($1::text IS NULL OR a.tenant = $1) AND a.pending_minor <> coalesce(h.held_minor, 0)`,
  },
  {
    name: 'pending_postings_mirror_journal',
    description:
      "every posting waiting to be folded into its account mirrors one journal entry of that account: its amount, and for a payer's capture the release of the whole hold",
    sql: `SELECT p.tenant, p.account_id, p.entry_id, p.posted_delta_minor, p.pending_delta_minor,
                 e.account_id AS entry_account_id, e.amount_minor AS entry_minor, c.amount_minor AS held_minor
            FROM pending_postings p
            LEFT JOIN journal_entries e ON e.id = p.entry_id
            LEFT JOIN transfers t ON t.id = e.transfer_id
            LEFT JOIN charges c ON t.kind = 'capture' AND c.tenant = t.tenant AND c.idempotency_key = t.reference
           WHERE ($1::text IS NULL OR p.tenant = $1)
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
    sql: `SELECT tenant, id, posted_minor, pending_minor FROM accounts
           WHERE ($1::text IS NULL OR tenant = $1) AND NOT allow_overdraft AND posted_minor - pending_minor < 0`,
  },
  {
    name: 'one_debit_per_key',
    description: 'each confirmed charge has exactly one capture transfer of its captured amount; no other charge has one',
    sql: `SELECT c.tenant, c.idempotency_key, c.hold_state, c.captured_minor, count(t.id) AS captures,
                 coalesce(sum(t.amount_minor), 0) AS captured_in_journal_minor
            FROM charges c
            LEFT JOIN transfers t ON t.tenant = c.tenant AND t.kind = 'capture' AND t.reference = c.idempotency_key
           WHERE ($1::text IS NULL OR c.tenant = $1)
           GROUP BY c.tenant, c.idempotency_key, c.hold_state, c.captured_minor
          HAVING (c.hold_state = 'CONFIRMED' AND (count(t.id) <> 1 OR sum(t.amount_minor) <> c.captured_minor))
              OR (c.hold_state <> 'CONFIRMED' AND count(t.id) <> 0)`,
  },
  {
    name: 'captures_have_charges',
    description: 'every capture transfer belongs to a charge',
    sql: `SELECT t.id, t.tenant, t.reference FROM transfers t
           WHERE ($1::text IS NULL OR t.tenant = $1) AND t.kind = 'capture'
             AND NOT EXISTS (SELECT 1 FROM charges c WHERE c.tenant = t.tenant AND c.idempotency_key = t.reference)`,
  },
  {
    name: 'refunds_within_capture',
    description: "each charge's refunded amount is the sum of its succeeded refunds and never exceeds its capture",
    sql: `SELECT c.tenant, c.idempotency_key, c.captured_minor, c.refunded_minor, coalesce(r.sum_minor, 0) AS refunds_minor
            FROM charges c
            LEFT JOIN (SELECT tenant, charge_key, sum(amount_minor) AS sum_minor FROM refunds
                        WHERE status = 'succeeded' GROUP BY tenant, charge_key) r
              ON r.tenant = c.tenant AND r.charge_key = c.idempotency_key
           WHERE ($1::text IS NULL OR c.tenant = $1)
             AND (c.refunded_minor <> coalesce(r.sum_minor, 0) OR c.refunded_minor > c.captured_minor)`,
  },
  {
    name: 'one_transfer_per_refund',
    description: 'each succeeded refund has its one transfer (reference <charge key>/<refund key>), moving its amount from payee to payer',
    sql: `SELECT r.tenant, r.charge_key, r.refund_key, r.amount_minor, t.id AS transfer_id, t.kind, t.reference,
                 t.amount_minor AS transfer_minor
            FROM refunds r
            JOIN charges c ON c.tenant = r.tenant AND c.idempotency_key = r.charge_key
            LEFT JOIN transfers t ON t.id = r.transfer_id
           WHERE ($1::text IS NULL OR r.tenant = $1) AND r.status = 'succeeded'
             AND (t.id IS NULL OR t.kind <> 'refund' OR t.tenant <> r.tenant
                  OR t.reference <> ledger_refund_reference(r.charge_key, r.refund_key)
                  OR t.amount_minor <> r.amount_minor
                  OR (SELECT count(*) FROM journal_entries e WHERE e.transfer_id = t.id) <> 2
                  OR NOT EXISTS (SELECT 1 FROM journal_entries e WHERE e.transfer_id = t.id
                                    AND e.account_id = c.payee_account_id AND e.amount_minor = -r.amount_minor)
                  OR NOT EXISTS (SELECT 1 FROM journal_entries e WHERE e.transfer_id = t.id
                                    AND e.account_id = c.payer_account_id AND e.amount_minor = r.amount_minor))`,
  },
  {
    name: 'refund_transfers_have_refunds',
    description: 'every refund transfer belongs to a succeeded refund',
    sql: `SELECT t.id, t.tenant, t.reference, t.amount_minor FROM transfers t
           WHERE ($1::text IS NULL OR t.tenant = $1) AND t.kind = 'refund'
             AND NOT EXISTS (SELECT 1 FROM refunds r WHERE r.transfer_id = t.id AND r.status = 'succeeded')`,
  },
];

/** Runs every ledger invariant in one repeatable-read snapshot, so concurrent writes cannot fake a violation. */
export async function checkLedgerInvariants(pool: LedgerPool, tenant: string | null = null): Promise<InvariantCheck[]> {
  const client = await pool.connect();
  // A connection whose ROLLBACK failed is in an unknown state: destroyed, never returned to the pool.
  let broken: Error | undefined;
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const checks: InvariantCheck[] = [];
    for (const query of invariantQueries) {
      const result = await client.query(query.sql, [tenant]);
      checks.push({
        name: query.name,
        description: query.description,
        violations: result.rowCount ?? 0,
        samples: result.rows.slice(0, sampleLimit),
      });
    }
    await client.query('COMMIT');
    return checks;
  } catch (error) {
    await client.query('ROLLBACK').catch((rollbackError: unknown) => {
      broken = rollbackError as Error;
    });
    throw error;
  } finally {
    client.release(broken);
  }
}
