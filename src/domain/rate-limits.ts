/**
 * Who may move money how fast: request-rate token buckets per API key and per tenant, and bounds on
 * the charges a key or a tenant may have holding money at once; and how fast callers without a
 * valid key (per source address), webhooks (per address and per provider) and health checks (per
 * address) may knock. Pure rules and header formatting; the buckets live in PostgreSQL
 * (src/ledger/rate-limits.ts) so every API process shares them.
 */

/** A token bucket: `burst` tokens at most, refilled at `ratePerSecond`; a request takes one. */
export interface BucketLimit {
  ratePerSecond: number;
  burst: number;
}

/** The limits one request is judged by; every field has a configured default (rateLimitDefaults). */
export interface RateLimitPolicy {
  key: BucketLimit;
  tenant: BucketLimit;
  /** Charges of the key (of the tenant) holding money at once: reserved holds and tries in flight. */
  keyMaxOpenHolds: number;
  tenantMaxOpenHolds: number;
}

/**
 * Defaults, each overridable by configuration (src/config.ts) and, for a key, by
 * `api-keys create --rate-per-second --burst --max-open-holds`. An agent that retries in a tight
 * loop gets 20 requests a second after a burst of 100; the tenant's 50 a second leaves room for a
 * few such keys; 100 open holds per key and 1,000 per tenant bound how much money one runaway agent
 * can tie up in holds.
 */
export const rateLimitDefaults = {
  keyRatePerSecond: 20,
  keyBurst: 100,
  tenantRatePerSecond: 50,
  tenantBurst: 200,
  keyMaxOpenHolds: 100,
  tenantMaxOpenHolds: 1_000,
} as const;

/**
 * Defaults for callers without a valid API key, each bucket per source address (IPv6: per /64)
 * unless named otherwise; each overridable by configuration (src/config.ts, docs/limits.md).
 *
 * - stranger: /v1 and /mcp requests that carry no API key, a malformed or unknown one, or a key this
 *   process has not yet seen authenticate. 10 a second after a burst of 100: a client mistyping
 *   its key, or a host starting a hundred agents at once, gets through; a flood of made-up keys
 *   costs at most 10 key lookups a second per address instead of as many as it can send.
 * - webhook address / provider: a provider delivers from a few addresses, in bursts after an
 *   outage; each request can cost several HMACs (signatures × the provider's live secrets). The
 *   provider's bucket bounds that work whatever the number of addresses sending.
 * - health: /healthz and /readyz. A checker probing every second (a load balancer, an orchestrator
 *   probing liveness and readiness of 10 replicas on one node every second) stays far below 20 a
 *   second; 200 of burst covers a fleet of checkers starting together.
 */
export const addressLimitDefaults = {
  strangerRatePerSecond: 10,
  strangerBurst: 100,
  webhookAddressRatePerSecond: 50,
  webhookAddressBurst: 200,
  webhookProviderRatePerSecond: 200,
  webhookProviderBurst: 1_000,
  healthRatePerSecond: 20,
  healthBurst: 200,
} as const;

/** Bounds on every configured or per-key value (also CHECKs on api_keys). */
export const rateLimitBounds = {
  ratePerSecondMax: 1_000_000,
  burstMax: 1_000_000,
  /** Open holds are counted on every charge create, at most this many index entries. */
  maxOpenHoldsMax: 100_000,
} as const;

/**
 * The most JSON-RPC messages one POST to /mcp may carry. Each costs a request token; a larger batch
 * is refused whole before any of it runs. (MCP 2025-06-18 removed batches; clients speaking
 * 2025-03-26 may still send them, and the SDK still parses them.)
 */
export const mcpBatchMaxCalls = 20;

/** What a 429 for open holds tells callers to wait: a hold ends when someone captures or cancels it. */
export const openHoldsRetryAfterSeconds = 5;

/**
 * Whose bucket a limit is, as the RateLimit fields and a 429's `scope` name it: an API key, its
 * tenant, a source address (callers without a valid key, webhooks, health checks) or a webhook provider.
 */
export const limitScopes = ['key', 'tenant', 'address', 'provider'] as const;

export type LimitScope = (typeof limitScopes)[number];

/** The order buckets are taken in, and listed in the RateLimit fields. */
const scopeOrder: readonly LimitScope[] = ['key', 'tenant', 'address', 'provider'];

/** A bucket after a take, as the ledger returns it. */
export interface BucketState {
  /** Tokens left after this request (fractional: the bucket refills continuously). */
  tokens: number;
  ratePerSecond: number;
  burst: number;
  /** Whether this request got its tokens from this bucket. */
  allowed: boolean;
}

/** Whole seconds until `needed` tokens are there; at least 1 (Retry-After 0 invites a busy loop). */
export function secondsUntilTokens(state: BucketState, needed: number): number {
  const missing = needed - state.tokens;
  if (missing <= 0) return 1;
  return Math.max(1, Math.ceil(missing / state.ratePerSecond));
}

/** Whole seconds until the bucket is full again: the RateLimit field's `t`. */
export function secondsUntilFull(state: BucketState): number {
  return Math.max(0, Math.ceil((state.burst - state.tokens) / state.ratePerSecond));
}

/**
 * The policy window advertised for a bucket: the seconds it takes to refill from empty. With `q`
 * = burst, the draft's reading "q units per w seconds" is the refill rate (exact when burst is a
 * multiple of the rate, as the defaults are).
 */
export function windowSeconds(limit: BucketLimit): number {
  return Math.max(1, Math.ceil(limit.burst / limit.ratePerSecond));
}

/**
 * The `RateLimit-Policy` field (draft-ietf-httpapi-ratelimit-headers-11, section 3): a Structured
 * Fields list, one item per bucket the request is judged by, named by its scope ("key" and "tenant",
 * or "address" and, for a webhook, "provider").
 */
export function rateLimitPolicyField(policy: Partial<Record<LimitScope, BucketLimit>>): string {
  return scopeOrder
    .flatMap((scope) => {
      const limit = policy[scope];
      return limit ? [`"${scope}";q=${limit.burst};w=${windowSeconds(limit)}`] : [];
    })
    .join(', ');
}

/**
 * The `RateLimit` field (same draft, section 4): per bucket `r`, the whole tokens left, and `t`,
 * the seconds until the bucket is full. A bucket this request did not reach (the key refused it
 * first) is left out: what it holds was not read.
 */
export function rateLimitField(states: Partial<Record<LimitScope, BucketState>>): string {
  return scopeOrder
    .flatMap((scope) => {
      const state = states[scope];
      return state ? [`"${scope}";r=${Math.max(0, Math.floor(state.tokens))};t=${secondsUntilFull(state)}`] : [];
    })
    .join(', ');
}

/** A refusal, for the surfaces to turn into a 429. */
export interface LimitRefusal {
  type: 'rate_limited' | 'open_holds_exceeded';
  scope: LimitScope;
  retryAfterSeconds: number;
  detail: string;
}

/** Whose limit a refusal names, by scope: "this API key's request limit is exhausted". */
const requestLimitNames: Record<LimitScope, string> = {
  key: "this API key's request limit",
  tenant: "this tenant's request limit",
  address: "this source address's request limit",
  provider: "this provider's request limit",
};

/**
 * Which bucket refused the request, if one did; judged in the order the ledger takes from them
 * (the key's before the tenant's, the address's before the provider's). `names` words the detail
 * for limits that cover only some requests ("this source address's limit on webhooks").
 */
export function requestRateRefusal(
  states: Partial<Record<LimitScope, BucketState>>,
  cost: number,
  names: Partial<Record<LimitScope, string>> = {},
): LimitRefusal | null {
  for (const scope of scopeOrder) {
    const state = states[scope];
    if (!state || state.allowed) continue;
    const limitName = names[scope] ?? requestLimitNames[scope];
    const tooBig = cost > state.burst;
    return {
      type: 'rate_limited',
      scope,
      retryAfterSeconds: secondsUntilTokens(state, Math.min(cost, state.burst)),
      detail: tooBig
        ? `this batch needs ${cost} more request tokens at once, more than ${limitName} allows in a burst (${state.burst}); send fewer calls at a time`
        : `${limitName} is exhausted (${state.ratePerSecond} requests/s, burst ${state.burst}); retry after the Retry-After seconds`,
    };
  }
  return null;
}

/** Open holds counted by the ledger (each at most its limit: the count stops there). */
export interface OpenHolds {
  key: number;
  tenant: number;
}

/** Whether `newCharges` more charges would take the key or the tenant past its open holds. */
export function openHoldsRefusal(
  open: OpenHolds,
  limits: { key: number; tenant: number },
  newCharges: number,
): LimitRefusal | null {
  if (newCharges <= 0) return null;
  for (const scope of ['key', 'tenant'] as const) {
    if (open[scope] + newCharges <= limits[scope]) continue;
    const whose = scope === 'key' ? 'this API key' : 'this tenant';
    return {
      type: 'open_holds_exceeded',
      scope,
      retryAfterSeconds: openHoldsRetryAfterSeconds,
      detail:
        `${whose} already has ${open[scope]} charges holding money, its open holds limit is ${limits[scope]}: ` +
        'capture or cancel a reserved charge (or wait for one in flight to finish) before creating another',
    };
  }
  return null;
}
