import { createApiKey, getApiKey, listApiKeys, principalForApiKey, revokeApiKey } from '../auth/api-keys.js';
import { acceptSignedRequest } from '../auth/request-signatures.js';
import type { LedgerPool } from '../ledger/pool.js';

/** A function of the key store, without the pool it runs on (the service holds that). */
type OnThePool<F> = F extends (pool: LedgerPool, ...rest: infer Rest) => infer Result ? (...rest: Rest) => Result : never;

/**
 * The API keys of every tenant, for the surfaces: who a key acts as, the signed requests of a key
 * that requires them, and the keys' administration (the CLI). The rules are src/auth's; this holds
 * the ledger pool they run on, so that no surface takes one.
 */
export class ApiKeyService {
  constructor(private readonly ledger: LedgerPool) {}

  /** Who a presented key acts as, or null for an unknown, revoked or expired key (looked up on every call). */
  readonly principalFor: OnThePool<typeof principalForApiKey> = (key) => principalForApiKey(this.ledger, key);
  /** Verifies a signed request against its key's secret and consumes its nonce, or refuses with 401. */
  readonly acceptSignedRequest: OnThePool<typeof acceptSignedRequest> = (...args) => acceptSignedRequest(this.ledger, ...args);
  readonly create: OnThePool<typeof createApiKey> = (...args) => createApiKey(this.ledger, ...args);
  readonly list: OnThePool<typeof listApiKeys> = (...args) => listApiKeys(this.ledger, ...args);
  readonly get: OnThePool<typeof getApiKey> = (...args) => getApiKey(this.ledger, ...args);
  readonly revoke: OnThePool<typeof revokeApiKey> = (...args) => revokeApiKey(this.ledger, ...args);
}
