import type { FastifyRequest } from 'fastify';
import { principalForApiKey } from '../auth/api-keys.js';
import type { Principal } from '../auth/principal.js';
import type { LedgerPool } from '../ledger/pool.js';
import { UnauthorizedError } from '../service/errors.js';

export { UnauthorizedError };

export function bearerToken(authorization: string | undefined): string | null {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  return match?.[1] ?? null;
}

/**
 * Who the request's API key acts as: tenant, key id and role. Keys are looked up on every request
 * (one indexed query, which also records the key's last use at most once a minute) rather than
 * cached, so revoking a key takes effect at once. A database outage is rethrown as is: the error
 * handler turns it into a 503, not a 401.
 */
export async function authenticate(request: FastifyRequest, ledger: LedgerPool): Promise<Principal> {
  const token = bearerToken(request.headers.authorization);
  if (token === null) {
    throw new UnauthorizedError('send an API key as "Authorization: Bearer <key>"; create one with `chargeguard api-keys create`');
  }
  const principal = await principalForApiKey(ledger, token);
  // An expired key is refused like a revoked one (401): it no longer authenticates anyone, so the
  // caller needs a new key, not another permission.
  if (principal === null) throw new UnauthorizedError('the API key is unknown, revoked or expired');
  return principal;
}
