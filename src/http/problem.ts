import type { FastifyReply } from 'fastify';
import { ChargeguardError, OverloadedError, RateLimitedError, UnauthorizedError, UnavailableError, type FieldError } from '../domain/errors.js';
import { errorKinds } from '../domain/error-kinds.js';
import { asUnavailable } from '../service/unavailable.js';
import type { WireProblem } from '../service/wire.js';

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
 * status and title are its kind's (src/domain/error-kinds.ts).
 */
export function problemFor(error: unknown, retryAfterSeconds: number): Problem {
  const e = asUnavailable(error);
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

