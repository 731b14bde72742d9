import type { BucketState, OpenHolds } from '../domain/rate-limits.js';
import type { LedgerPool } from './pool.js';

/** What one request asks of the limiter. */
export interface TakeRequest {
  tenant: string;
  /** The API key's id (its own limits are read from api_keys), or null: the tenant's bucket only. */
  keyId: string | null;
  /** Tokens to take: 1 per request, one per JSON-RPC call of an MCP batch (0: read only). */
  cost: number;
  /** Defaults for a key without limits of its own, and the tenant's limits. */
  keyDefaults: { ratePerSecond: number; burst: number; maxOpenHolds: number };
  tenantLimits: { ratePerSecond: number; burst: number; maxOpenHolds: number };
  /**
   * Idempotency keys of the charges this request would create (distinct): their open holds are
   * counted, and those the ledger already knows (replays) are not new. Empty: no charge is created.
   */
  chargeKeys: readonly string[];
}

export interface TakeResult {
  /** The key's bucket (null without a key); the tenant's, or null when the key refused first and the tenant's was never written. */
  key: BucketState | null;
  tenant: BucketState | null;
  /** The key's own limits as stored (null: the default). */
  keyLimits: { ratePerSecond: number; burst: number; maxOpenHolds: number };
  /** Counted only when chargeKeys is not empty; each count stops at its limit. */
  openHolds: OpenHolds | null;
  /** How many of chargeKeys the ledger already has a charge for. */
  knownCharges: number;
}

/**
 * The refill-and-take of one bucket as the DO UPDATE of an INSERT … ON CONFLICT: the row's tokens
 * grow by the seconds since `refilled_at` times the rate, up to the burst, and the request's
 * tokens are taken if that many are there. `greatest(…, 0)` and `greatest(refilled_at, now())`
 * keep a statement that started before a concurrent one but got the row lock after it from
 * running the clock backwards (now() is the statement's start).
 */
const refilled = `least(EXCLUDED.burst, b.tokens + EXCLUDED.rate_per_second * greatest(extract(epoch FROM now() - b.refilled_at), 0))`;
const takeOnConflict = `ON CONFLICT (scope, subject) DO UPDATE SET
      tokens = CASE WHEN ${refilled} >= $3 THEN ${refilled} - $3 ELSE ${refilled} END,
      rate_per_second = EXCLUDED.rate_per_second,
      burst = EXCLUDED.burst,
      refilled_at = greatest(b.refilled_at, now()),
      last_take_allowed = ${refilled} >= $3
    RETURNING tokens, rate_per_second, burst, last_take_allowed`;

/**
 * One statement, one round trip: the key's bucket first, then the tenant's only if the key allowed
 * the request (a key over its own limit must not drain its tenant's bucket for the other keys),
 * and, for a charge create, the open holds of the key and the tenant and whether the charge keys
 * are already known. A new bucket starts full. The key's limits come from its api_keys row, read
 * in the same statement, so a change to them applies on the next request.
 *
 * The tenant's token is not given back when the key refuses, and the key's is not given back when
 * the tenant refuses: a request the tenant refused still used one of its key's tokens.
 */
const takeSql = `
WITH key_limits AS (
  SELECT coalesce(k.rate_limit_per_second, $4::int) AS rate, coalesce(k.rate_limit_burst, $5::int) AS burst,
         coalesce(k.max_open_holds, $6::int) AS max_open_holds
    FROM api_keys k WHERE k.id = $2
), key_take AS (
  INSERT INTO rate_limit_buckets AS b (scope, subject, tokens, rate_per_second, burst, refilled_at, last_take_allowed)
  SELECT 'key', $2, CASE WHEN burst >= $3 THEN burst - $3 ELSE burst END, rate, burst, now(), burst >= $3 FROM key_limits
  ${takeOnConflict}
), tenant_take AS (
  INSERT INTO rate_limit_buckets AS b (scope, subject, tokens, rate_per_second, burst, refilled_at, last_take_allowed)
  SELECT 'tenant', $1, CASE WHEN $8::int >= $3 THEN $8::int - $3 ELSE $8::int END, $7::int, $8::int, now(), $8::int >= $3
   WHERE NOT EXISTS (SELECT 1 FROM key_take WHERE NOT last_take_allowed)
  ${takeOnConflict}
)
SELECT (SELECT row_to_json(key_take) FROM key_take) AS key_bucket,
       (SELECT row_to_json(tenant_take) FROM tenant_take) AS tenant_bucket,
       (SELECT row_to_json(key_limits) FROM key_limits) AS key_limits,
       CASE WHEN cardinality($10::text[]) > 0 THEN (
         SELECT count(*) FROM (
           SELECT 1 FROM charges
            WHERE created_by_key_id = $2 AND hold_state = 'TRIED'
            LIMIT (SELECT max_open_holds FROM key_limits)
         ) held
       ) END AS key_open_holds,
       CASE WHEN cardinality($10::text[]) > 0 THEN (
         SELECT count(*) FROM (SELECT 1 FROM charges WHERE tenant = $1 AND hold_state = 'TRIED' LIMIT $9::int) held
       ) END AS tenant_open_holds,
       CASE WHEN cardinality($10::text[]) > 0 THEN (
         SELECT count(*) FROM charges WHERE tenant = $1 AND idempotency_key = ANY ($10::text[])
       ) ELSE 0 END AS known_charges`;

interface BucketRow {
  tokens: number;
  rate_per_second: number;
  burst: number;
  last_take_allowed: boolean;
}

function bucketOf(row: BucketRow | null): BucketState | null {
  if (row === null) return null;
  return { tokens: row.tokens, ratePerSecond: row.rate_per_second, burst: row.burst, allowed: row.last_take_allowed };
}

/** Takes the request's tokens from its key's and its tenant's buckets, and counts open holds for a charge create. */
export async function takeRequestTokens(pool: LedgerPool, request: TakeRequest): Promise<TakeResult> {
  const result = await pool.query<{
    key_bucket: BucketRow | null;
    tenant_bucket: BucketRow | null;
    key_limits: { rate: number; burst: number; max_open_holds: number } | null;
    key_open_holds: number | null;
    tenant_open_holds: number | null;
    known_charges: number;
  }>({
    name: 'rate_limits_take',
    text: takeSql,
    values: [
      request.tenant,
      request.keyId,
      request.cost,
      request.keyDefaults.ratePerSecond,
      request.keyDefaults.burst,
      request.keyDefaults.maxOpenHolds,
      request.tenantLimits.ratePerSecond,
      request.tenantLimits.burst,
      request.tenantLimits.maxOpenHolds,
      request.chargeKeys,
    ],
  });
  const row = result.rows[0]!;
  const keyLimits = row.key_limits
    ? { ratePerSecond: row.key_limits.rate, burst: row.key_limits.burst, maxOpenHolds: row.key_limits.max_open_holds }
    : request.keyDefaults;
  return {
    key: bucketOf(row.key_bucket),
    tenant: bucketOf(row.tenant_bucket),
    keyLimits,
    openHolds:
      row.tenant_open_holds === null ? null : { key: row.key_open_holds ?? 0, tenant: row.tenant_open_holds },
    knownCharges: row.known_charges,
  };
}

/** What a peek found, having written nothing. */
export interface PeekResult {
  /** Whether the key's and the tenant's buckets, refilled to now, each hold the request's tokens. */
  tokensThere: boolean;
  /** How many of chargeKeys the ledger already has a charge for. */
  knownCharges: number;
}

/**
 * The take's questions without the take: a read of the two buckets (refilled to now, as the take
 * would) and of the charge keys, with no row lock and no write, so that it waits for no other
 * request of the same key or tenant (their takes lock the same two rows) and commits nothing. A
 * bucket without a row is full, as a new one starts.
 */
const peekSql = `
WITH key_limits AS (
  SELECT coalesce(k.rate_limit_per_second, $4::int) AS rate, coalesce(k.rate_limit_burst, $5::int) AS burst
    FROM api_keys k WHERE k.id = $2
)
SELECT coalesce((
         SELECT least(l.burst, b.tokens + l.rate * greatest(extract(epoch FROM now() - b.refilled_at), 0)) >= $3
           FROM rate_limit_buckets b, key_limits l WHERE b.scope = 'key' AND b.subject = $2
       ), (SELECT burst >= $3 FROM key_limits), true)
       AND coalesce((
         SELECT least($7::int, b.tokens + $6::int * greatest(extract(epoch FROM now() - b.refilled_at), 0)) >= $3
           FROM rate_limit_buckets b WHERE b.scope = 'tenant' AND b.subject = $1
       ), $7::int >= $3) AS tokens_there,
       (SELECT count(*) FROM charges WHERE tenant = $1 AND idempotency_key = ANY ($8::text[]))::int AS known_charges`;

/** Reads what takeRequestTokens would find (tokens there? charge keys known?) and writes nothing. */
export async function peekRequestTokens(pool: LedgerPool, request: Omit<TakeRequest, 'keyDefaults' | 'tenantLimits'> & {
  keyDefaults: { ratePerSecond: number; burst: number };
  tenantLimits: { ratePerSecond: number; burst: number };
}): Promise<PeekResult> {
  const result = await pool.query<{ tokens_there: boolean; known_charges: number }>({
    name: 'rate_limits_peek',
    text: peekSql,
    values: [
      request.tenant,
      request.keyId,
      request.cost,
      request.keyDefaults.ratePerSecond,
      request.keyDefaults.burst,
      request.tenantLimits.ratePerSecond,
      request.tenantLimits.burst,
      request.chargeKeys,
    ],
  });
  const row = result.rows[0]!;
  return { tokensThere: row.tokens_there, knownCharges: row.known_charges };
}

/**
 * The buckets of callers without a valid API key (rate_limit_buckets.scope): per source address
 * for /v1 and /mcp requests, per address and per provider for webhooks, per address for health checks.
 */
export type AddressBucketScope = 'stranger' | 'webhook_address' | 'webhook_provider' | 'health';

export const addressBucketScopes: readonly AddressBucketScope[] = ['stranger', 'webhook_address', 'webhook_provider', 'health'];

/** One bucket of a chained take: which row, and the limits it is refilled and bounded by. */
export interface ChainedBucket {
  scope: AddressBucketScope;
  subject: string;
  ratePerSecond: number;
  burst: number;
}

/**
 * One or two buckets in one statement, the second taken only if the first allowed the request (as
 * the tenant's after the key's: a source address over its own limit must not drain its provider's
 * bucket for the other addresses). A new bucket starts full.
 */
const takeChainSql = `
WITH first_take AS (
  INSERT INTO rate_limit_buckets AS b (scope, subject, tokens, rate_per_second, burst, refilled_at, last_take_allowed)
  VALUES ($1, $2, CASE WHEN $5::int >= $3::int THEN $5::int - $3::int ELSE $5::int END, $4::int, $5::int, now(), $5::int >= $3::int)
  ${takeOnConflict}
), second_take AS (
  INSERT INTO rate_limit_buckets AS b (scope, subject, tokens, rate_per_second, burst, refilled_at, last_take_allowed)
  SELECT $6, $7, CASE WHEN $9::int >= $3::int THEN $9::int - $3::int ELSE $9::int END, $8::int, $9::int, now(), $9::int >= $3::int
   WHERE $7::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM first_take WHERE NOT last_take_allowed)
  ${takeOnConflict}
)
SELECT (SELECT row_to_json(first_take) FROM first_take) AS first_bucket,
       (SELECT row_to_json(second_take) FROM second_take) AS second_bucket`;

/**
 * Takes `cost` tokens from `first` and, if it allowed the request, from `second`: one round trip.
 * The second's state is null when the first refused (its row was not touched).
 */
export async function takeChainedTokens(
  pool: LedgerPool,
  cost: number,
  first: ChainedBucket,
  second: ChainedBucket | null = null,
): Promise<{ first: BucketState; second: BucketState | null }> {
  const result = await pool.query<{ first_bucket: BucketRow; second_bucket: BucketRow | null }>({
    name: 'rate_limits_take_chain',
    text: takeChainSql,
    values: [
      first.scope,
      first.subject,
      cost,
      first.ratePerSecond,
      first.burst,
      second?.scope ?? null,
      second?.subject ?? null,
      second?.ratePerSecond ?? null,
      second?.burst ?? null,
    ],
  });
  const row = result.rows[0]!;
  return { first: bucketOf(row.first_bucket)!, second: bucketOf(row.second_bucket) };
}

/**
 * Deletes the address and provider buckets that have refilled to full: such a row says nothing a
 * missing row does not (a new bucket starts full), so no decision changes, and the table keeps
 * only the addresses that knocked within the last burst/rate seconds. Returns how many went.
 */
export async function deleteFullAddressBuckets(pool: LedgerPool): Promise<number> {
  const result = await pool.query({
    name: 'rate_limits_delete_full',
    text: `DELETE FROM rate_limit_buckets
            WHERE scope = ANY ($1::text[])
              AND tokens + rate_per_second * greatest(extract(epoch FROM now() - refilled_at), 0) >= burst`,
    values: [addressBucketScopes],
  });
  return result.rowCount ?? 0;
}
