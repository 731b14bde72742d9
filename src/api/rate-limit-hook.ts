import type { FastifyReply, FastifyRequest } from 'fastify';
import type { AppContext } from '../runtime/app-context.js';
import { admitRequest, rateLimitSettingsFrom, type RateLimitSettings } from '../auth/rate-limits.js';
import { idempotencyKeyPattern } from '../domain/limits.js';

/**
 * Judges one request (or the extra calls of an MCP batch) against its key's and tenant's limits:
 * sets the RateLimit-Policy and RateLimit fields on the reply (answered on success too, so a client
 * can slow down before it is refused) and throws the refusal, which the error handler answers with
 * 429 and Retry-After. The time spent is reported as a Server-Timing metric named `ratelimit`.
 */
export async function admit(
  context: AppContext,
  settings: RateLimitSettings,
  request: FastifyRequest,
  reply: FastifyReply,
  what: { cost: number; chargeKeys?: readonly string[] },
): Promise<void> {
  const startedAt = performance.now();
  const admission = await admitRequest(context.ledger, settings, request.principal, what);
  reply.headers(admission.headers);
  reply.header('server-timing', `ratelimit;dur=${(performance.now() - startedAt).toFixed(3)}`);
  if (admission.refusal) throw admission.refusal;
}

/**
 * The charge a POST /v1/charges would create, named by its Idempotency-Key or else by its
 * Idempotency-Token (a redeemed token becomes the charge's key); none for other routes, or when
 * neither header is well-formed (the route refuses that with 400, and nothing is held).
 */
function chargeKeyOf(request: FastifyRequest): string[] {
  if (request.routeOptions.config.operation !== 'charges.create') return [];
  const named = request.headers['idempotency-key'] ?? request.headers['idempotency-token'];
  return typeof named === 'string' && idempotencyKeyPattern.test(named) ? [named] : [];
}

/**
 * The hook for the tenant scope, registered right after authentication: an unauthenticated request
 * was refused (401) before it, so it spends nobody's tokens. Every /v1 and /mcp request costs one
 * token, replays included; a charge create (POST /v1/charges) also has the open holds of its key
 * and tenant checked, unless the ledger already knows its Idempotency-Key (a replay holds nothing new).
 * A malformed Idempotency-Key is left for the route to refuse with 400.
 */
export function rateLimitHook(context: AppContext): (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  const settings = rateLimitSettingsFrom(context.config);
  return async (request, reply) => {
    await admit(context, settings, request, reply, { cost: 1, chargeKeys: chargeKeyOf(request) });
  };
}

/** The settings the hook judges by, for the MCP route's extra calls. */
export function mcpRateLimitSettings(context: AppContext): RateLimitSettings {
  return rateLimitSettingsFrom(context.config);
}
