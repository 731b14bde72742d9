import type { LedgerPool } from './pool.js';
import { classifyLedgerError } from './errors.js';

/**
 * The idempotency token store (src/service/idempotency-tokens.ts makes and checks tokens). Only a
 * token's SHA-256 is kept. Expiry is judged by the database clock on both sides (issue and use),
 * so API instances with skewed clocks cannot disagree about whether a token is still good.
 */
export interface IssuedTokenRecord {
  expiresAt: string;
}

/**
 * Records a new token good for `ttlMs`, and in the same statement deletes at most `purgeBatch`
 * of the tenant's tokens that expired without being used, so a tenant's unused tokens cannot pile up.
 */
export async function insertIdempotencyToken(
  pool: LedgerPool,
  token: { tenant: string; tokenHash: string; issuedByKeyId: string | null; ttlMs: number; purgeBatch: number },
): Promise<IssuedTokenRecord> {
  const result = await pool
    .query<{ expires_at: Date }>(
      `WITH purged AS (
         DELETE FROM idempotency_tokens
          WHERE tenant = $1 AND (tenant, token_hash) IN (
            SELECT tenant, token_hash FROM idempotency_tokens
             WHERE tenant = $1 AND consumed_at IS NULL AND expires_at <= now()
             LIMIT $5)
       )
       INSERT INTO idempotency_tokens (tenant, token_hash, issued_by_key_id, expires_at)
       VALUES ($1, $2, $3, now() + $4::bigint * interval '1 millisecond')
       RETURNING expires_at`,
      [token.tenant, token.tokenHash, token.issuedByKeyId, token.ttlMs, token.purgeBatch],
    )
    .catch((error: unknown) => {
      throw classifyLedgerError(error);
    });
  const row = result.rows[0];
  if (!row) throw new Error('inserting an idempotency token returned no row');
  return { expiresAt: row.expires_at.toISOString() };
}

/**
 * Marks the token used, unless it is unknown to this tenant or expired before its first use; one
 * statement, so concurrent first uses all see the same outcome (the row lock orders them and each
 * re-reads the row the previous one wrote). A token already used stays usable forever: from its
 * first use on it is a charge's key. Null: no such usable token.
 */
export async function consumeIdempotencyToken(
  pool: LedgerPool,
  tenant: string,
  tokenHash: string,
): Promise<{ consumedAt: string } | null> {
  const result = await pool
    .query<{ consumed_at: Date }>(
      `UPDATE idempotency_tokens SET consumed_at = coalesce(consumed_at, now())
        WHERE tenant = $1 AND token_hash = $2 AND (consumed_at IS NOT NULL OR expires_at > now())
        RETURNING consumed_at`,
      [tenant, tokenHash],
    )
    .catch((error: unknown) => {
      throw classifyLedgerError(error);
    });
  const row = result.rows[0];
  return row ? { consumedAt: row.consumed_at.toISOString() } : null;
}
