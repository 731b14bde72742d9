import type { ApiKeyPrincipal } from '../ledger/api-keys.js';

/** Limits of the cache of verified API keys; see VerifiedKeys. */
export interface VerifiedKeysOptions {
  /** How long a verified key is believed without asking the database again; 0 turns the cache off. Milliseconds. */
  ttlMs: number;
  /** Keys held at most; the least recently verified goes first. */
  maxKeys: number;
  /** The clock (milliseconds since the epoch); tests pass their own. */
  now?: () => number;
}

/**
 * The keys that authenticated through this process in the last `ttlMs`, by SHA-256, with who they
 * act as: a request carrying one is not looked up again until then. Under load every request of a
 * key paid the lookup's round trip, refusals included (bench:overload: one of a refusal's three
 * statements); a second's cache leaves one lookup per key per second per process.
 *
 * What it costs: a key revoked (or its expiry moved earlier) in the database is still accepted by
 * this process for at most `ttlMs`. A key's own expiry is never overstayed (an entry ends at the key's
 * `expires_at` if that comes first). Unknown, revoked and expired keys are not cached (a new key
 * works at once, and callers without a valid key are limited by their address instead), nor is a
 * lookup that failed. Lookups of the same key that overlap share one round trip.
 */
export class VerifiedKeys {
  /** Insertion order is verification order: a key is re-inserted each time it is looked up. */
  private readonly entries = new Map<string, { principal: Promise<ApiKeyPrincipal | null>; untilMs: number }>();
  private readonly now: () => number;

  constructor(private readonly options: VerifiedKeysOptions) {
    if (!Number.isInteger(options.ttlMs) || options.ttlMs < 0) throw new Error(`ttlMs must be a whole number of at least 0, got ${options.ttlMs}`);
    if (!Number.isInteger(options.maxKeys) || options.maxKeys < 1) throw new Error(`maxKeys must be a whole number of at least 1, got ${options.maxKeys}`);
    this.now = options.now ?? Date.now;
  }

  /** Who the key of `keyHash` acts as: the cached principal while it is fresh, otherwise `lookUp()`'s answer. */
  principalFor(keyHash: string, lookUp: () => Promise<ApiKeyPrincipal | null>): Promise<ApiKeyPrincipal | null> {
    if (this.options.ttlMs === 0) return lookUp();
    const nowMs = this.now();
    const cached = this.entries.get(keyHash);
    if (cached !== undefined && cached.untilMs > nowMs) return cached.principal;
    const principal = lookUp();
    const entry = { principal, untilMs: nowMs + this.options.ttlMs };
    this.entries.delete(keyHash);
    this.entries.set(keyHash, entry);
    if (this.entries.size > this.options.maxKeys) this.entries.delete(this.entries.keys().next().value!);
    principal.then(
      (found) => {
        if (this.entries.get(keyHash) !== entry) return;
        const expiresAtMs = found?.mandate.expiresAt ? Date.parse(found.mandate.expiresAt) : Infinity;
        if (found === null || expiresAtMs <= this.now()) this.entries.delete(keyHash);
        else entry.untilMs = Math.min(entry.untilMs, expiresAtMs);
      },
      () => {
        if (this.entries.get(keyHash) === entry) this.entries.delete(keyHash);
      },
    );
    return principal;
  }

  /** Drops the key (a request found it no longer authenticates). */
  forget(keyHash: string): void {
    this.entries.delete(keyHash);
  }
}

/** 10,000 keys, as many as the proven keys (src/auth/proven-keys.ts): far more than one deployment serves at once. */
export const verifiedKeysMax = 10_000;

/** One second: a revocation reaches every API process within it, and a busy key costs one lookup a second per process. */
export const verifiedKeyTtlMsDefault = 1_000;
