import type { ChargeguardConfig } from '../config.js';
import {
  openHoldsRefusal,
  rateLimitField,
  rateLimitPolicyField,
  requestRateRefusal,
  type BucketState,
  type LimitScope,
} from '../domain/rate-limits.js';
import { takeRequestTokens } from '../ledger/rate-limits.js';
import type { LedgerPool } from '../ledger/pool.js';
import { RateLimitedError } from '../service/errors.js';
import type { Principal } from './principal.js';

/** The configured limits: a key's defaults (its own limits win) and its tenant's. */
export interface RateLimitSettings {
  keyDefaults: { ratePerSecond: number; burst: number; maxOpenHolds: number };
  tenant: { ratePerSecond: number; burst: number; maxOpenHolds: number };
}

export function rateLimitSettingsFrom(config: ChargeguardConfig): RateLimitSettings {
  return {
    keyDefaults: {
      ratePerSecond: config.RATE_LIMIT_KEY_PER_SECOND,
      burst: config.RATE_LIMIT_KEY_BURST,
      maxOpenHolds: config.OPEN_HOLDS_KEY_MAX,
    },
    tenant: {
      ratePerSecond: config.RATE_LIMIT_TENANT_PER_SECOND,
      burst: config.RATE_LIMIT_TENANT_BURST,
      maxOpenHolds: config.OPEN_HOLDS_TENANT_MAX,
    },
  };
}

/** What the limiter decided for one request: the RateLimit fields to answer with, and a refusal or null. */
export interface Admission {
  headers: { 'ratelimit-policy': string; ratelimit: string };
  refusal: RateLimitedError | null;
}

/**
 * Takes `cost` request tokens for the principal's key and tenant (one database round trip, shared
 * by every API process) and, when the request would create charges, checks the open holds of the
 * key and the tenant. `chargeKeys` are the idempotency keys of those charges: one the ledger
 * already knows is a replay (or an attach), which holds nothing new, so only the others count.
 * Replays still cost their request token.
 */
export async function admitRequest(
  pool: LedgerPool,
  settings: RateLimitSettings,
  principal: Principal,
  request: { cost: number; chargeKeys?: readonly string[] },
): Promise<Admission> {
  const chargeKeys = [...new Set(request.chargeKeys ?? [])];
  const taken = await takeRequestTokens(pool, {
    tenant: principal.tenant,
    keyId: principal.keyId,
    cost: request.cost,
    keyDefaults: settings.keyDefaults,
    tenantLimits: settings.tenant,
    chargeKeys,
  });
  const states: Partial<Record<LimitScope, BucketState>> = {};
  if (taken.key) states.key = taken.key;
  if (taken.tenant) states.tenant = taken.tenant;
  const headers = {
    'ratelimit-policy': rateLimitPolicyField({ key: taken.keyLimits, tenant: settings.tenant }),
    ratelimit: rateLimitField(states),
  };
  const refusal =
    requestRateRefusal(states, request.cost) ??
    (taken.openHolds
      ? openHoldsRefusal(
          taken.openHolds,
          { key: taken.keyLimits.maxOpenHolds, tenant: settings.tenant.maxOpenHolds },
          chargeKeys.length - taken.knownCharges,
        )
      : null);
  return {
    headers,
    refusal: refusal ? new RateLimitedError(refusal.type, refusal.scope, refusal.retryAfterSeconds, refusal.detail) : null,
  };
}
