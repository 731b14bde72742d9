import type { Mandate } from '../domain/mandate.js';
import type { LedgerPool } from './pool.js';

/** A key's role, as the api_keys.role CHECK allows it (src/domain/permissions.ts says what each may do). */
export type ApiKeyRole = 'agent' | 'admin';

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
  role: ApiKeyRole;
  createdAt: string;
  /** The last request the key authenticated, to the minute (null: never used). */
  lastUsedAt: string | null;
  revokedAt: string | null;
  /** What the key may charge (every rule null: no mandate). */
  mandate: Mandate;
  /** The key's own request rate and open holds limits (each null: the configured default; docs/limits.md). */
  limits: ApiKeyLimits;
  /** Only RFC 9421 signed requests are accepted (the key has a signing secret; never shown again). */
  requiresSignature: boolean;
}

/** Who a presented key acts as. */
export interface ApiKeyPrincipal {
  keyId: string;
  tenant: string;
  role: ApiKeyRole;
  mandate: Mandate;
  /**
   * The secret requests must be signed with (null: the key does not require signed requests). For
   * the verifier only: authentication takes it off before the principal goes anywhere else.
   */
  signingSecret: string | null;
}

/** A key's own limits; null: the configured default (src/domain/rate-limits.ts). */
export interface ApiKeyLimits {
  ratePerSecond: number | null;
  burst: number | null;
  maxOpenHolds: number | null;
}

export const defaultKeyLimits: ApiKeyLimits = { ratePerSecond: null, burst: null, maxOpenHolds: null };

interface MandateColumns {
  max_amount_minor: string | null;
  daily_limit_minor: string | null;
  allowed_payee_account_ids: string[] | null;
  currency: string | null;
  expires_at: Date | null;
}

function mandateOf(row: MandateColumns): Mandate {
  return {
    maxAmountMinor: row.max_amount_minor === null ? null : Number(row.max_amount_minor),
    dailyLimitMinor: row.daily_limit_minor === null ? null : Number(row.daily_limit_minor),
    allowedPayeeAccountIds: row.allowed_payee_account_ids,
    currency: row.currency,
    expiresAt: row.expires_at?.toISOString() ?? null,
  };
}

interface ApiKeyRow extends MandateColumns {
  id: string;
  tenant: string;
  key_prefix: string;
  label: string | null;
  role: ApiKeyRole;
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
  rate_limit_per_second: number | null;
  rate_limit_burst: number | null;
  max_open_holds: number | null;
  signing_secret: string | null;
}

function fromRow(row: ApiKeyRow): ApiKeyRecord {
  return {
    id: row.id,
    tenant: row.tenant,
    keyPrefix: row.key_prefix,
    label: row.label,
    role: row.role,
    createdAt: row.created_at.toISOString(),
    lastUsedAt: row.last_used_at?.toISOString() ?? null,
    revokedAt: row.revoked_at?.toISOString() ?? null,
    mandate: mandateOf(row),
    limits: { ratePerSecond: row.rate_limit_per_second, burst: row.rate_limit_burst, maxOpenHolds: row.max_open_holds },
    requiresSignature: row.signing_secret !== null,
  };
}

export async function insertApiKey(
  pool: LedgerPool,
  key: { id: string; tenant: string; keyHash: string; keyPrefix: string; label: string | null; role: ApiKeyRole; mandate: Mandate; limits?: ApiKeyLimits; signingSecret?: string | null },
): Promise<ApiKeyRecord> {
  const m = key.mandate;
  const result = await pool.query<ApiKeyRow>(
    `INSERT INTO api_keys (id, tenant, key_hash, key_prefix, label, role,
                           max_amount_minor, daily_limit_minor, allowed_payee_account_ids, currency, expires_at,
                           signing_secret, rate_limit_per_second, rate_limit_burst, max_open_holds)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) RETURNING *`,
    [key.id, key.tenant, key.keyHash, key.keyPrefix, key.label, key.role,
     m.maxAmountMinor, m.dailyLimitMinor, m.allowedPayeeAccountIds, m.currency, m.expiresAt,
     key.signingSecret ?? null,
     key.limits?.ratePerSecond ?? null, key.limits?.burst ?? null, key.limits?.maxOpenHolds ?? null],
  );
  return fromRow(result.rows[0]!);
}

/**
 * Who the key with this hash acts as, with its mandate, or null for an unknown, revoked or expired
 * key; records the use (of a usable key only).
 * One round trip: the lookup, and an update of last_used_at that writes only when the recorded
 * use is more than a minute old (or none), so a key used a thousand times a minute is written
 * once a minute, not a thousand times.
 */
export async function principalForKeyHash(pool: LedgerPool, keyHash: string): Promise<ApiKeyPrincipal | null> {
  const result = await pool.query<{ id: string; tenant: string; role: ApiKeyRole; signing_secret: string | null } & MandateColumns>(
    `WITH found AS (
       SELECT id, tenant, role, last_used_at,
              max_amount_minor, daily_limit_minor, allowed_payee_account_ids, currency, expires_at, signing_secret
         FROM api_keys
        WHERE key_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
     ), used AS (
       UPDATE api_keys SET last_used_at = now()
         FROM found
        WHERE api_keys.id = found.id
          AND (found.last_used_at IS NULL OR found.last_used_at < now() - interval '1 minute')
     )
     SELECT id, tenant, role, max_amount_minor, daily_limit_minor, allowed_payee_account_ids, currency, expires_at, signing_secret
       FROM found`,
    [keyHash],
  );
  const row = result.rows[0];
  return row ? { keyId: row.id, tenant: row.tenant, role: row.role, mandate: mandateOf(row), signingSecret: row.signing_secret } : null;
}

export async function getApiKey(pool: LedgerPool, id: string): Promise<ApiKeyRecord | null> {
  const result = await pool.query<ApiKeyRow>('SELECT * FROM api_keys WHERE id = $1', [id]);
  return result.rows[0] ? fromRow(result.rows[0]) : null;
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

/** A key as a signed queue message names it (by id): its principal, and why it may not act if it may not. */
export interface SigningKeyLookup {
  principal: ApiKeyPrincipal;
  /** null: usable; otherwise why not (the message is dead-lettered with this reason). */
  unusable: 'revoked' | 'expired' | null;
}

/**
 * The key with this id, revoked and expired ones included so a refusal can say which, for the queue
 * intake's signature check (src/auth/message-signatures.ts). Looked up per message, never cached,
 * so a revocation takes effect on the next message.
 */
export async function signingKeyById(pool: LedgerPool, keyId: string): Promise<SigningKeyLookup | null> {
  const result = await pool.query<{ id: string; tenant: string; role: ApiKeyRole; signing_secret: string | null; revoked: boolean; expired: boolean } & MandateColumns>(
    `SELECT id, tenant, role, max_amount_minor, daily_limit_minor, allowed_payee_account_ids, currency, expires_at, signing_secret,
            revoked_at IS NOT NULL AS revoked, (expires_at IS NOT NULL AND expires_at <= now()) AS expired
       FROM api_keys WHERE id = $1`,
    [keyId],
  );
  const row = result.rows[0];
  if (!row) return null;
  return {
    principal: { keyId: row.id, tenant: row.tenant, role: row.role, mandate: mandateOf(row), signingSecret: row.signing_secret },
    unusable: row.revoked ? 'revoked' : row.expired ? 'expired' : null,
  };
}
