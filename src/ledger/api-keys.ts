import type { LedgerPool } from './pool.js';

/**
 * The API key store: only a key's SHA-256 is kept (src/auth/api-keys.ts makes keys and hashes).
 * Lookups are a single indexed equality on the hash, on every request; keys are not cached, so a
 * revocation takes effect on the next request.
 */
export interface ApiKeyRecord {
  id: string;
  tenant: string;
  keyPrefix: string;
  label: string | null;
  createdAt: string;
  revokedAt: string | null;
}

interface ApiKeyRow {
  id: string;
  tenant: string;
  key_prefix: string;
  label: string | null;
  created_at: Date;
  revoked_at: Date | null;
}

function fromRow(row: ApiKeyRow): ApiKeyRecord {
  return {
    id: row.id,
    tenant: row.tenant,
    keyPrefix: row.key_prefix,
    label: row.label,
    createdAt: row.created_at.toISOString(),
    revokedAt: row.revoked_at?.toISOString() ?? null,
  };
}

export async function insertApiKey(
  pool: LedgerPool,
  key: { id: string; tenant: string; keyHash: string; keyPrefix: string; label: string | null },
): Promise<ApiKeyRecord> {
  const result = await pool.query<ApiKeyRow>(
    `INSERT INTO api_keys (id, tenant, key_hash, key_prefix, label) VALUES ($1, $2, $3, $4, $5) RETURNING *`,
    [key.id, key.tenant, key.keyHash, key.keyPrefix, key.label],
  );
  return fromRow(result.rows[0]!);
}

/** The tenant of the key with this hash, or null for an unknown or revoked key. */
export async function tenantForKeyHash(pool: LedgerPool, keyHash: string): Promise<string | null> {
  const result = await pool.query<{ tenant: string }>(
    'SELECT tenant FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL',
    [keyHash],
  );
  return result.rows[0]?.tenant ?? null;
}

export async function listApiKeys(pool: LedgerPool, tenant: string | null): Promise<ApiKeyRecord[]> {
  const result = await pool.query<ApiKeyRow>(
    'SELECT * FROM api_keys WHERE ($1::text IS NULL OR tenant = $1) ORDER BY tenant, created_at',
    [tenant],
  );
  return result.rows.map(fromRow);
}

/** Revoking is permanent; revoking again keeps the first revocation's time. */
export async function revokeApiKey(pool: LedgerPool, id: string): Promise<ApiKeyRecord | null> {
  const result = await pool.query<ApiKeyRow>(
    'UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING *',
    [id],
  );
  return result.rows[0] ? fromRow(result.rows[0]) : null;
}
