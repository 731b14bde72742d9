import type { LedgerPool } from './pool.js';

/**
 * Fresh planner statistics for the ledger's busy tables. A tenant new since the last ANALYZE has
 * none, and the planner then picks nested loops that make the invariant queries quadratic.
 */
export async function analyzeLedger(pool: LedgerPool): Promise<void> {
  await pool.query('ANALYZE accounts, charges, transfers, journal_entries');
}

/**
 * Asks PostgreSQL to write its dirty pages now rather than in the middle of whatever runs next.
 * Needs a superuser (or pg_checkpoint): false when refused, which only costs the caller noise.
 */
export async function requestCheckpoint(pool: LedgerPool): Promise<boolean> {
  return pool.query('CHECKPOINT').then(
    () => true,
    (error: unknown) => {
      // 42501 insufficient_privilege: the refusal the caller expects; anything else is a real failure.
      if ((error as { code?: unknown }).code === '42501') return false;
      throw error;
    },
  );
}
