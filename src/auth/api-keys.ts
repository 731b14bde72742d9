import { createHash, randomBytes } from 'node:crypto';
import {
  getApiKey,
  insertApiKey,
  listApiKeys,
  principalForKeyHash,
  revokeApiKey,
  defaultKeyLimits,
  type ApiKeyLimits,
  type ApiKeyPrincipal,
  type ApiKeyRecord,
} from '../ledger/api-keys.js';
import type { LedgerPool } from '../ledger/pool.js';
import { defaultRole, type Role } from '../domain/permissions.js';
import { noMandate, type Mandate } from '../domain/mandate.js';
import { assertTenant } from '../domain/identifiers.js';
import { newSigningSecret } from './request-signatures.js';

/** Every key starts with this, so a leaked key is recognisable by secret scanners and people. */
export const apiKeyPrefix = 'cgk_';
const secretBytes = 32;
const shownPrefixLength = apiKeyPrefix.length + 8;

/** SHA-256 is enough: the key carries 256 random bits, so there is nothing to brute-force. */
export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

/**
 * Creates a key for the tenant and returns it in clear: the only time it is ever visible. With
 * `requireSignature` the key also gets a signing secret (returned here, and only here) and accepts
 * only requests signed with it (src/auth/request-signatures.ts).
 */
export async function createApiKey(
  pool: LedgerPool,
  tenant: string,
  label: string | null = null,
  role: Role = defaultRole,
  mandate: Mandate = noMandate,
  signing: { requireSignature?: boolean } = {},
  /** Its own request rate and open holds limits (docs/limits.md); null fields take the configured defaults. */
  limits: ApiKeyLimits = defaultKeyLimits,
): Promise<{ key: string; record: ApiKeyRecord; signingSecret: string | null }> {
  assertTenant(tenant);
  const key = apiKeyPrefix + randomBytes(secretBytes).toString('base64url');
  const id = `key_${randomBytes(8).toString('hex')}`;
  const signingSecret = signing.requireSignature ? newSigningSecret() : null;
  const record = await insertApiKey(pool, { id, tenant, keyHash: hashApiKey(key), keyPrefix: key.slice(0, shownPrefixLength), label, role, mandate, limits, signingSecret });
  return { key, record, signingSecret };
}

/**
 * Who a presented key acts as (tenant, key id, role, mandate), or null for an unknown, revoked or
 * expired key. Looked
 * up on every call, never cached, so a revocation takes effect on the next request; records the
 * key's last use (at most one write a minute per key).
 */
export async function principalForApiKey(pool: LedgerPool, key: string): Promise<ApiKeyPrincipal | null> {
  if (!key.startsWith(apiKeyPrefix)) return null;
  return principalForKeyHash(pool, hashApiKey(key));
}

// Surfaces never import the ledger: they reach the whole key store through this module.
export { getApiKey, listApiKeys, revokeApiKey, type ApiKeyLimits, type ApiKeyPrincipal, type ApiKeyRecord };
