import {
  type BucketLimit,
  openHoldsRefusal,
  rateLimitField,
  rateLimitPolicyField,
  requestRateRefusal,
  type BucketState,
  type LimitScope,
} from '../domain/rate-limits.js';
import { deleteFullAddressBuckets, peekRequestTokens, takeChainedTokens, takeRequestTokens, type ChainedBucket, type PeekResult } from '../ledger/rate-limits.js';
import type { LedgerPool } from '../ledger/pool.js';
import { RateLimitedError } from '../domain/errors.js';
import type { Principal } from './principal.js';

/** The configured limits: a key's defaults (its own limits win) and its tenant's. */
export interface RateLimitSettings {
  keyDefaults: { ratePerSecond: number; burst: number; maxOpenHolds: number };
  tenant: { ratePerSecond: number; burst: number; maxOpenHolds: number };
}

/**
 * The settings (src/config.ts) the limits are read from, named here so that authentication sits below
 * the configuration, which imports the service and the codec.
 */
export type RateLimitConfig = Readonly<
  Record<
    | 'RATE_LIMIT_KEY_PER_SECOND'
    | 'RATE_LIMIT_KEY_BURST'
    | 'OPEN_HOLDS_KEY_MAX'
    | 'RATE_LIMIT_TENANT_PER_SECOND'
    | 'RATE_LIMIT_TENANT_BURST'
    | 'OPEN_HOLDS_TENANT_MAX',
    number
  >
>;

export function rateLimitSettingsFrom(config: RateLimitConfig): RateLimitSettings {
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
  /** How many of the request's charge keys the ledger already has a charge for (read in the same statement; 0 without any). */
  knownCharges: number;
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
    knownCharges: taken.knownCharges,
  };
}

/**
 * What admitRequest would find, read without taking anything or waiting for any other request's
 * take: whether the key's and the tenant's buckets hold `cost` tokens, and how many of
 * `chargeKeys` the ledger knows. For a request that a full process may refuse before it does
 * anything (src/http/rate-limit-hook.ts).
 */
export async function peekRequest(
  pool: LedgerPool,
  settings: RateLimitSettings,
  principal: Principal,
  request: { cost: number; chargeKeys: readonly string[] },
): Promise<PeekResult> {
  return peekRequestTokens(pool, {
    tenant: principal.tenant,
    keyId: principal.keyId,
    cost: request.cost,
    keyDefaults: settings.keyDefaults,
    tenantLimits: settings.tenant,
    chargeKeys: [...new Set(request.chargeKeys)],
  });
}

/** The configured limits of callers without a valid API key (docs/limits.md, Callers without a key). */
export interface AddressLimitSettings {
  stranger: BucketLimit;
  webhookAddress: BucketLimit;
  webhookProvider: BucketLimit;
  health: BucketLimit;
}

/** The settings (src/config.ts) the limits of callers without a proven key are read from. */
export type AddressLimitConfig = Readonly<
  Record<
    | 'RATE_LIMIT_STRANGER_PER_SECOND'
    | 'RATE_LIMIT_STRANGER_BURST'
    | 'RATE_LIMIT_WEBHOOK_ADDRESS_PER_SECOND'
    | 'RATE_LIMIT_WEBHOOK_ADDRESS_BURST'
    | 'RATE_LIMIT_WEBHOOK_PROVIDER_PER_SECOND'
    | 'RATE_LIMIT_WEBHOOK_PROVIDER_BURST'
    | 'RATE_LIMIT_HEALTH_PER_SECOND'
    | 'RATE_LIMIT_HEALTH_BURST',
    number
  >
>;

export function addressLimitSettingsFrom(config: AddressLimitConfig): AddressLimitSettings {
  return {
    stranger: { ratePerSecond: config.RATE_LIMIT_STRANGER_PER_SECOND, burst: config.RATE_LIMIT_STRANGER_BURST },
    webhookAddress: { ratePerSecond: config.RATE_LIMIT_WEBHOOK_ADDRESS_PER_SECOND, burst: config.RATE_LIMIT_WEBHOOK_ADDRESS_BURST },
    webhookProvider: { ratePerSecond: config.RATE_LIMIT_WEBHOOK_PROVIDER_PER_SECOND, burst: config.RATE_LIMIT_WEBHOOK_PROVIDER_BURST },
    health: { ratePerSecond: config.RATE_LIMIT_HEALTH_PER_SECOND, burst: config.RATE_LIMIT_HEALTH_BURST },
  };
}

/** What a request without a proven key is metered as, and by what it is keyed. */
export type AddressAdmissionRequest =
  | { kind: 'stranger' | 'health'; address: string }
  /** `provider` null: not a provider name at all (the route refuses it with 400); the address's bucket only. */
  | { kind: 'webhook'; address: string; provider: string | null };

const refusalNames = {
  stranger: { address: "this source address's limit on requests without a valid API key" },
  health: { address: "this source address's limit on health checks" },
  webhook: { address: "this source address's limit on webhooks", provider: "this provider's limit on webhooks" },
} as const;

/**
 * Takes one token for a request from a caller not (yet) known by a valid API key: from its source
 * address's bucket, and for a webhook then from its provider's (one database round trip, shared by
 * every API process). Answers the RateLimit fields and the refusal, as admitRequest does.
 */
export async function admitByAddress(
  pool: LedgerPool,
  settings: AddressLimitSettings,
  request: AddressAdmissionRequest,
): Promise<Admission> {
  const addressLimit =
    request.kind === 'stranger' ? settings.stranger : request.kind === 'health' ? settings.health : settings.webhookAddress;
  const addressBucket: ChainedBucket = {
    scope: request.kind === 'webhook' ? 'webhook_address' : request.kind,
    subject: request.address,
    ...addressLimit,
  };
  const providerBucket: ChainedBucket | null =
    request.kind === 'webhook' && request.provider !== null
      ? { scope: 'webhook_provider', subject: request.provider, ...settings.webhookProvider }
      : null;
  const taken = await takeChainedTokens(pool, 1, addressBucket, providerBucket);
  const states: Partial<Record<LimitScope, BucketState>> = { address: taken.first };
  if (taken.second) states.provider = taken.second;
  const policy: Partial<Record<LimitScope, BucketLimit>> = { address: addressLimit };
  if (providerBucket) policy.provider = settings.webhookProvider;
  const refusal = requestRateRefusal(states, 1, refusalNames[request.kind]);
  return {
    headers: { 'ratelimit-policy': rateLimitPolicyField(policy), ratelimit: rateLimitField(states) },
    refusal: refusal ? new RateLimitedError(refusal.type, refusal.scope, refusal.retryAfterSeconds, refusal.detail) : null,
    knownCharges: 0,
  };
}

/** For the served API's periodic clean-up of idle address buckets (src/api/server.ts). */
export { deleteFullAddressBuckets };
