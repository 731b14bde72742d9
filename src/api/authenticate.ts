import type { FastifyReply, FastifyRequest } from 'fastify';
import { apiKeyPrefix, hashApiKey } from '../auth/api-keys.js';
import type { Principal } from '../auth/principal.js';
import type { SignatureKey } from '../auth/request-signatures.js';
import type { ApiKeyService } from '../service/api-key-service.js';
import type { AppContext } from '../runtime/app-context.js';
import { UnauthorizedError } from '../domain/errors.js';
import { bearerToken } from '../http/bearer-token.js';
import { addressLimiterFor, admitFromAddress } from '../http/rate-limit-hook.js';
import { VerifiedKeys, verifiedKeysMax } from '../auth/verified-keys.js';

export { UnauthorizedError };

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by authenticate for a key that requires signed requests (null: it does not). */
    signatureKey: SignatureKey | null;
  }
}


/** Longer than any key `api-keys create` makes (4 + 43 characters): not hashed, not looked up. */
const apiKeyMaxLength = 128;

const verifiedKeysByContext = new WeakMap<AppContext, VerifiedKeys>();

/** The context's cache of verified keys, made on first use with its configured TTL. */
function verifiedKeysFor(context: AppContext): VerifiedKeys {
  let verified = verifiedKeysByContext.get(context);
  if (!verified) {
    verified = new VerifiedKeys({ ttlMs: context.config.API_KEY_CACHE_TTL_MS, maxKeys: verifiedKeysMax });
    verifiedKeysByContext.set(context, verified);
  }
  return verified;
}

/**
 * Who the request's API key acts as: tenant, key id and role. A key is looked up (one indexed
 * query, which also records the key's last use at most once a minute) when it has not been
 * verified through this process within API_KEY_CACHE_TTL_MS (src/auth/verified-keys.ts), so a
 * revocation takes effect within that time (at once with 0). A database outage is rethrown as is:
 * the error handler turns it into a 503, not a 401.
 *
 * Before the lookup, a request whose key has not authenticated through this process lately (no
 * key, a malformed, unknown or revoked one, or a valid key's first request here) takes a token
 * from its source address's bucket (docs/limits.md, Callers without a key): past that limit it is
 * refused with 429 and its key is never looked up. The only work before that is one SHA-256 of a
 * key-shaped token, to recognise a proven key.
 */
export async function authenticate(request: FastifyRequest, reply: FastifyReply, context: AppContext): Promise<Principal> {
  const token = bearerToken(request.headers.authorization);
  const keyHash = token !== null && token.startsWith(apiKeyPrefix) && token.length <= apiKeyMaxLength ? hashApiKey(token) : null;
  const { provenKeys } = addressLimiterFor(context);
  if (keyHash === null || !provenKeys.has(keyHash)) await admitFromAddress(context, request, reply, { kind: 'stranger' });
  if (token === null) {
    throw new UnauthorizedError('send an API key as "Authorization: Bearer <key>"; create one with `chargeguard api-keys create`');
  }
  const verified = verifiedKeysFor(context);
  const found = keyHash === null ? null : await verified.principalFor(keyHash, () => context.keys.principalFor(token));
  // An expired key is refused like a revoked one (401): it no longer authenticates anyone, so the
  // caller needs a new key, not another permission.
  if (found === null) {
    if (keyHash !== null) {
      provenKeys.forget(keyHash);
      verified.forget(keyHash);
    }
    throw new UnauthorizedError('the API key is unknown, revoked or expired');
  }
  provenKeys.remember(keyHash!);
  // The signing secret stays with this request's signature check, out of the principal that the
  // services and MCP tools receive.
  const { signingSecret, ...principal } = found;
  request.signatureKey = signingSecret === null ? null : { keyId: principal.keyId, secret: signingSecret };
  return principal;
}

/**
 * For a key that requires signed requests: verifies the RFC 9421 signature over the request as
 * received (method, URL as the Host header and path name it, body bytes through Content-Digest,
 * Idempotency-Key) and consumes its nonce, or refuses with 401 naming what failed. Runs once the
 * body is read and before any handler, so a refused request records nothing. A key without a
 * signing secret is not checked: a signature it sends is ignored, there being no secret to check
 * it against.
 */
export async function verifySignedRequest(request: FastifyRequest, keys: Pick<ApiKeyService, 'acceptSignedRequest'>): Promise<void> {
  if (request.signatureKey === null) return;
  await keys.acceptSignedRequest(
    { method: request.method, targetUri: `${request.protocol}://${request.host}${request.url}`, headers: request.headers, body: request.rawBody },
    request.signatureKey,
  );
}
