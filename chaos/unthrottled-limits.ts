/**
 * The front door's per-key and per-tenant limits, out of the way: in a chaos run or an overload
 * bench every refusal must be the service protecting itself (or a fault), never a rate limit that
 * one load generator's single key runs into.
 */
export const unthrottledLimits = {
  RATE_LIMIT_KEY_PER_SECOND: '100000',
  RATE_LIMIT_KEY_BURST: '100000',
  RATE_LIMIT_TENANT_PER_SECOND: '100000',
  RATE_LIMIT_TENANT_BURST: '100000',
  OPEN_HOLDS_KEY_MAX: '100000',
  OPEN_HOLDS_TENANT_MAX: '100000',
} as const;
