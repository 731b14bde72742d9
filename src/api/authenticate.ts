import type { FastifyRequest } from 'fastify';
import { tenantForApiKey } from '../auth/api-keys.js';
import type { LedgerPool } from '../ledger/pool.js';

/** No usable API key on the request: a 401, and nothing is read or written. */
export class UnauthorizedError extends Error {
  readonly code = 'unauthorized';
}

export function bearerToken(authorization: string | undefined): string | null {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '');
  return match?.[1] ?? null;
}

/**
 * The tenant of the request's API key. Keys are looked up on every request (one indexed query)
 * rather than cached, so revoking a key takes effect at once. A database outage is rethrown as
 * is: the error handler turns it into a 503, not a 401.
 */
export async function authenticate(request: FastifyRequest, ledger: LedgerPool): Promise<string> {
  const token = bearerToken(request.headers.authorization);
  if (token === null) {
    throw new UnauthorizedError('send an API key as "Authorization: Bearer <key>"; create one with `chargeguard api-keys create`');
  }
  const tenant = await tenantForApiKey(ledger, token);
  if (tenant === null) throw new UnauthorizedError('the API key is unknown or revoked');
  return tenant;
}
