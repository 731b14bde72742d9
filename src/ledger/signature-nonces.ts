import type { LedgerPool } from './pool.js';

/**
 * Single-use nonces of signed requests (RFC 9421 `nonce`), per API key. The table's primary key
 * (key_id, nonce) is what makes a nonce single-use: of any number of concurrent requests with one
 * nonce, exactly one insert wins.
 */

/** Expired nonce rows deleted by each consumption, at most: keeps the table bounded without a job. */
export const signatureNoncePruneBatch = 16;

/**
 * Records the nonce as used until `expiresAt` and returns true, or returns false when it is
 * already in use for this key. A row that has expired (its signature would now be refused as
 * stale) does not count: the nonce is taken over, so a client may reuse a nonce once its old
 * signature can no longer be replayed.
 *
 * The same statement deletes up to `signatureNoncePruneBatch` expired rows of any key. Each
 * consumption adds one row and may remove several, so expired rows never pile up while requests
 * flow, and a quiet system has nothing to prune. SKIP LOCKED keeps concurrent verifications from
 * waiting on each other's pruning; the row being inserted is left out of the batch because one
 * statement must not both delete and take over the same row.
 */
export async function consumeSignatureNonce(
  pool: LedgerPool,
  nonce: { keyId: string; nonce: string; expiresAt: Date; now: Date },
): Promise<boolean> {
  const result = await pool.query(
    `WITH pruned AS (
       DELETE FROM signature_nonces
        WHERE (key_id, nonce) IN (
                SELECT key_id, nonce FROM signature_nonces
                 WHERE expires_at < $4 AND NOT (key_id = $1 AND nonce = $2)
                 ORDER BY expires_at
                 LIMIT $5
                   FOR UPDATE SKIP LOCKED)
     )
     INSERT INTO signature_nonces (key_id, nonce, expires_at) VALUES ($1, $2, $3)
     ON CONFLICT (key_id, nonce) DO UPDATE SET expires_at = EXCLUDED.expires_at
        WHERE signature_nonces.expires_at < $4
     RETURNING 1`,
    [nonce.keyId, nonce.nonce, nonce.expiresAt, nonce.now, signatureNoncePruneBatch],
  );
  return result.rowCount === 1;
}

/** Rows still held (expired or not), for tests and the operator: how big the table is. */
export async function countSignatureNonces(pool: LedgerPool, keyId?: string): Promise<number> {
  const result = await pool.query<{ n: string }>(
    'SELECT count(*) AS n FROM signature_nonces WHERE ($1::text IS NULL OR key_id = $1)',
    [keyId ?? null],
  );
  return Number(result.rows[0]!.n);
}
