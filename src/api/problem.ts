import type { FastifyReply } from 'fastify';
import {
  ChargeDeclinedError,
  ChargeStateConflictError,
  ForbiddenError,
  MandateExceededError,
  IdempotencyConflictError,
  RateLimitedError,
  NotFoundError,
  UnavailableError,
  ValidationError,
  type FieldError,
} from '../service/errors.js';
import { AccountConflictError } from '../service/accounts-service.js';
import { asUnavailable } from '../service/unavailable.js';
import type { WireProblem } from '../service/wire.js';
import { UnauthorizedError } from './authenticate.js';

export const problemContentType = 'application/problem+json; charset=utf-8';

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

/**
 * Maps every error a route can meet to RFC 9457 problem details. `type` is the client error's
 * stable code (the contract names them: `idempotency_conflict`, …), so callers can branch on it.
 */
export function problemFor(error: unknown, retryAfterSeconds: number): Problem {
  const e = asUnavailable(error);
  if (e instanceof ValidationError) {
    return { body: problem(400, e.code, 'Invalid request', e.message, { errors: e.errors }), headers: {} };
  }
  if (e instanceof UnauthorizedError) {
    return {
      body: problem(401, 'unauthorized', 'Unauthenticated', e.message),
      headers: { 'www-authenticate': 'Bearer realm="chargeguard"' },
    };
  }
  if (e instanceof ForbiddenError) {
    return { body: problem(403, e.code, 'Forbidden', e.message, { operation: e.operation }), headers: {} };
  }
  if (e instanceof MandateExceededError) {
    return { body: problem(403, e.code, 'Mandate exceeded', e.message, { rule: e.rule }), headers: {} };
  }
  if (e instanceof RateLimitedError) {
    // `violated-policies` is the member the RateLimit draft defines for this (its section 5.1); the
    // RateLimit-Policy and RateLimit fields were set on the reply by the limiter (docs/limits.md).
    const extensions = { scope: e.scope, ...(e.code === 'rate_limited' ? { 'violated-policies': [e.scope] } : {}) };
    return {
      body: { ...problem(429, e.code, 'Too many requests', e.message), ...extensions },
      headers: { 'retry-after': String(e.retryAfterSeconds) },
    };
  }
  if (e instanceof NotFoundError) return { body: problem(404, e.code, 'Not found', e.message), headers: {} };
  if (e instanceof ChargeStateConflictError) {
    return { body: problem(409, e.code, 'Charge state conflict', e.message, { reason: e.reason }), headers: {} };
  }
  if (e instanceof AccountConflictError) return { body: problem(409, e.code, 'Account conflict', e.message), headers: {} };
  if (e instanceof IdempotencyConflictError) {
    return { body: problem(422, e.code, 'Idempotency key reused with a different request', e.message), headers: {} };
  }
  if (e instanceof ChargeDeclinedError) {
    return { body: problem(402, e.code, 'Charge declined', e.message, { reason: e.declineCode }), headers: {} };
  }
  if (e instanceof UnavailableError) {
    return {
      body: problem(503, e.code, 'Service unavailable', e.message, { dependency: e.dependency }),
      headers: { 'retry-after': String(retryAfterSeconds) },
    };
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
  return {
    body: problem(500, 'internal_error', 'Internal error', 'an unexpected error occurred; retrying with the same idempotency key is safe'),
    headers: {},
  };
}

/** Sends a problem document carrying the request's id, the one its log lines and X-Request-Id header carry. */
export function sendProblem(reply: FastifyReply, found: Problem): FastifyReply {
  const body: WireProblem = { ...found.body, request_id: reply.request.id };
  return reply.code(body.status).headers(found.headers).type(problemContentType).send(body);
}
