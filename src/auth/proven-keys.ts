/**
 * The API keys (by their SHA-256, never in clear) that authenticated recently through this process.
 * A request carrying one skips the per-address limit on callers without a valid key, so a flood of
 * made-up keys from an address does not lock out the valid keys sent from it; it still has its key
 * looked up, so a revocation takes effect at once, and a key that no longer authenticates is forgotten.
 * Least recently used first out: the set holds at most `maxKeys`.
 */
export class ProvenKeys {
  /** Insertion order is use order: a key is re-inserted on every use. */
  private readonly keys = new Set<string>();

  constructor(private readonly maxKeys: number) {}

  has(keyHash: string): boolean {
    return this.keys.has(keyHash);
  }

  remember(keyHash: string): void {
    this.keys.delete(keyHash);
    this.keys.add(keyHash);
    if (this.keys.size > this.maxKeys) this.keys.delete(this.keys.values().next().value!);
  }

  forget(keyHash: string): void {
    this.keys.delete(keyHash);
  }
}

/** 10,000 hashes of 64 hex characters: about 1.5 MB at most, far more keys than one deployment serves at once. */
export const provenKeysMax = 10_000;
