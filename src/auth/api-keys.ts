import { createHash, randomBytes } from 'node:crypto';
import type { LedgerPool } from '../ledger/pool.js';
import { assertTenant } from '../client/validation.js';

/** Every key starts with this, so a leaked key is recognisable by secret scanners and people. */
export const apiKeyPrefix = 'cgk_';
const secretBytes = 32;
const shownPrefixLength = apiKeyPrefix.length + 8;

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

/** SHA-256 is enough: the key carries 256 random bits, so there is nothing to brute-force. */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/** Creates a key for the tenant and returns it in clear: the only time it is ever visible. */
export async function createApiKey(
  pool: LedgerPool,
  tenant: string,
  label: string | null = null,
): Promise<{ key: string; record: ApiKeyRecord }> {
  assertTenant(tenant);
  const key = apiKeyPrefix + randomBytes(secretBytes).toString('base64url');
  const id = `key_${randomBytes(8).toString('hex')}`;
  const result = await pool.query<ApiKeyRow>(
    `INSERT INTO api_keys (id, tenant, key_hash, key_prefix, label) VALUES ($1, $2, $3, $4, $5) RETURNING *`,
    [id, tenant, hashApiKey(key), key.slice(0, shownPrefixLength), label],
  );
  return { key, record: fromRow(result.rows[0]!) };
}

/** The tenant a presented key belongs to, or null for an unknown or revoked key. */
export async function tenantForApiKey(pool: LedgerPool, key: string): Promise<string | null> {
  if (!key.startsWith(apiKeyPrefix)) return null;
  const result = await pool.query<{ tenant: string }>(
    'SELECT tenant FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL',
    [hashApiKey(key)],
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

/** Revoking is permanent and takes effect on the next request (keys are not cached). */
export async function revokeApiKey(pool: LedgerPool, id: string): Promise<ApiKeyRecord | null> {
  const result = await pool.query<ApiKeyRow>(
    'UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING *',
    [id],
  );
  return result.rows[0] ? fromRow(result.rows[0]) : null;
}
