import type { FastifyReply } from 'fastify';
import { z } from 'zod';
import { ChargeguardError, dependencies, OverloadedError, RateLimitedError, UnauthorizedError, UnavailableError, type FieldError } from '../domain/errors.js';
import { errorKinds } from '../domain/error-kinds.js';
import { mandateRules } from '../domain/mandate.js';
import { limitScopes } from '../domain/rate-limits.js';

export const problemContentType = 'application/problem+json; charset=utf-8';

/** RFC 9457 problem details, with the offending fields for validation errors. */
export const wireProblemSchema = z
  .object({
    type: z.string().describe('stable machine-readable code, e.g. idempotency_conflict'),
    title: z.string(),
    status: z.number().int(),
    detail: z.string(),
    instance: z.string().optional(),
    errors: z.array(z.object({ field: z.string(), message: z.string() })).optional(),
    reason: z.string().optional().describe('for charge_state_conflict: which state refused the operation'),
    operation: z.string().optional().describe('for forbidden: the operation the key\'s role does not allow, e.g. accounts.open'),
    rule: z
      .enum(mandateRules)
      .optional()
      .describe('for mandate_exceeded: the mandate rule the charge broke'),
    dependency: z.enum(dependencies).optional().describe('for service_unavailable: what is unreachable'),
    scope: z
      .enum(limitScopes)
      .optional()
      .describe('for rate_limited and open_holds_exceeded: whose limit was reached (address: the source address of a caller without a valid key, a webhook or a health check; provider: a webhook provider)'),
    'violated-policies': z
      .array(z.enum(limitScopes))
      .optional()
      .describe('for rate_limited: the RateLimit-Policy entries that refused the request (RateLimit headers draft)'),
    request_id: z.string().optional().describe('the id this request is logged under; also its X-Request-Id header'),
  });
export type WireProblem = z.infer<typeof wireProblemSchema>;

/** A problem document and the headers that go with it. */
export interface Problem {
  body: WireProblem;
  headers: Record<string, string>;
}

function problem(status: number, type: string, title: string, detail: string, extra: Partial<WireProblem> = {}): WireProblem {
  return { type, title, status, detail, ...extra };
}

/** Fastify's own errors (body parsing, limits) that a caller can fix, by their code. */
const fastifyClientErrors: Record<string, { status: number; type: string; title: string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: { status: 413, type: 'payload_too_large', title: 'Request body too large' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { status: 415, type: 'unsupported_media_type', title: 'Unsupported media type' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { status: 400, type: 'malformed_request', title: 'Malformed request' },
  FST_ERR_CTP_EMPTY_JSON_BODY: { status: 400, type: 'malformed_json', title: 'Malformed JSON body' },
  FST_ERR_CTP_INVALID_JSON_BODY: { status: 400, type: 'malformed_json', title: 'Malformed JSON body' },
};

/** The headers a kind of error carries besides its document: how to authenticate, when to come back. */
function headersFor(error: ChargeguardError, retryAfterSeconds: number): Record<string, string> {
  if (error instanceof UnauthorizedError) return { 'www-authenticate': 'Bearer realm="chargeguard"' };
  // The RateLimit-Policy and RateLimit fields were set on the reply by the limiter (docs/limits.md).
  if (error instanceof RateLimitedError) return { 'retry-after': String(error.retryAfterSeconds) };
  if (error instanceof OverloadedError) return { 'retry-after': String(error.retryAfterSeconds) };
  if (error instanceof UnavailableError) return { 'retry-after': String(retryAfterSeconds) };
  return {};
}

/**
 * Maps every error a route can meet to RFC 9457 problem details. `type` is the client error's
 * stable code (the contract names them: `idempotency_conflict`, …), so callers can branch on it;
 * status and title are its kind's (src/domain/error-kinds.ts). A Temporal or PostgreSQL failure is
 * told apart from a bug by the service's asUnavailable before it gets here (the API's error handler):
 * this module knows neither client.
 */
export function problemFor(error: unknown, retryAfterSeconds: number): Problem {
  const e = error;
  if (e instanceof ChargeguardError) {
    const { status, title } = e.kind;
    return { body: problem(status, e.code, title, e.message, e.extensions() as Partial<WireProblem>), headers: headersFor(e, retryAfterSeconds) };
  }
  const code = (e as { code?: unknown } | null)?.code;
  const known = typeof code === 'string' ? fastifyClientErrors[code] : undefined;
  if (known) {
    const detail = (e as Error).message;
    const errors: FieldError[] | undefined = known.status === 400 ? [{ field: 'body', message: detail }] : undefined;
    return { body: problem(known.status, known.type, known.title, detail, errors ? { errors } : {}), headers: {} };
  }
  const statusCode = (e as { statusCode?: unknown } | null)?.statusCode;
  if (typeof statusCode === 'number' && statusCode >= 400 && statusCode < 500) {
    return { body: problem(statusCode, 'bad_request', 'Bad request', (e as Error).message), headers: {} };
  }
  const internal = errorKinds.internal_error;
  return {
    body: problem(internal.status, 'internal_error', internal.title, 'an unexpected error occurred; retrying with the same idempotency key is safe'),
    headers: {},
  };
}

/** Sends a problem document carrying the request's id, the one its log lines and X-Request-Id header carry. */
export function sendProblem(reply: FastifyReply, found: Problem): FastifyReply {
  const body: WireProblem = { ...found.body, request_id: reply.request.id };
  return reply.code(body.status).headers(found.headers).type(problemContentType).send(body);
}

