import type { FastifyRequest } from 'fastify';
import { ValidationError } from '../domain/errors.js';
import { assertIdempotencyKey } from '../service/validation.js';
import { idempotencyTokenHeader } from '../service/idempotency-tokens.js';

export const idempotencyKeyHeader = 'Idempotency-Key';

/** The Idempotency-Key header, or null when absent; refused here, named as the header, when malformed. */
export function idempotencyKeyOf(request: FastifyRequest): string | null {
  const value = request.headers['idempotency-key'];
  if (Array.isArray(value)) {
    throw new ValidationError([{ field: idempotencyKeyHeader, message: 'must be sent once' }]);
  }
  if (value === undefined) return null;
  return assertIdempotencyKey(value, idempotencyKeyHeader);
}

/**
 * The query string parser replaces percent-encoded bytes that are not UTF-8 (a lone surrogate's,
 * say) instead of refusing them, so the value a route sees would differ from what was sent.
 * Refused here, naming the parameter.
 */
export function assertWellFormedQuery(request: FastifyRequest): void {
  const url = request.raw.url ?? '';
  const start = url.indexOf('?');
  if (start < 0) return;
  const errors: Array<{ field: string; message: string }> = [];
  for (const pair of url.slice(start + 1).split('&')) {
    if (pair === '') continue;
    const [name = '', value = ''] = pair.split(/=(.*)/s);
    const decodedName = decodeOrNull(name);
    if (decodedName === null || decodeOrNull(value) === null) {
      errors.push({ field: decodedName ?? name, message: 'is not valid percent-encoded UTF-8' });
    }
  }
  if (errors.length > 0) throw new ValidationError(errors);
}

function decodeOrNull(component: string): string | null {
  try {
    return decodeURIComponent(component.replaceAll('+', ' '));
  } catch {
    return null;
  }
}

/**
 * The parsed body, or undefined when the request carried none. Fastify hands a bodiless POST to
 * the route as null, the same value as a JSON `null` body; only the latter is a caller's error.
 */
export function bodyOf(request: FastifyRequest): unknown {
  const length = request.headers['content-length'];
  const carriesBody = request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
  return carriesBody ? request.body : undefined;
}

export function requireIdempotencyKey(request: FastifyRequest): string {
  const key = idempotencyKeyOf(request);
  if (key === null) {
    throw new ValidationError([
      { field: idempotencyKeyHeader, message: 'is required: 1-255 visible ASCII characters, reused verbatim on every retry' },
    ]);
  }
  return key;
}

/** A create names its charge by the caller's own key, or by a token the server issued. */
export type CreateKeySource = { key: string } | { token: string };

/**
 * Idempotency-Key, or else Idempotency-Token (src/service/idempotency-tokens.ts judges the token);
 * both at once would leave it unclear which names the charge, so that is refused naming both.
 * Neither: refused as a missing Idempotency-Key.
 */
export function keyOrTokenOf(request: FastifyRequest): CreateKeySource {
  const token = request.headers['idempotency-token'];
  if (token === undefined) return { key: requireIdempotencyKey(request) };
  if (Array.isArray(token)) {
    throw new ValidationError([{ field: idempotencyTokenHeader, message: 'must be sent once' }]);
  }
  if (request.headers['idempotency-key'] !== undefined) {
    const why = 'name the charge one way: your own key, or a token from POST /v1/idempotency-tokens';
    throw new ValidationError([
      { field: idempotencyKeyHeader, message: `cannot be sent with ${idempotencyTokenHeader}: ${why}` },
      { field: idempotencyTokenHeader, message: `cannot be sent with ${idempotencyKeyHeader}: ${why}` },
    ]);
  }
  return { token };
}

/**
 * `Prefer: wait=N` (RFC 7240): the caller would rather get a 202 after N seconds than wait the
 * whole budget. It can shorten the server's wait budget, never lengthen it.
 */
export function preferredWaitMs(request: FastifyRequest, waitBudgetMs: number): { waitMs: number; applied: string | null } {
  const prefer = request.headers.prefer;
  const text = Array.isArray(prefer) ? prefer.join(',') : (prefer ?? '');
  const match = /(?:^|[,;\s])wait\s*=\s*"?(\d+)"?/i.exec(text);
  if (!match) return { waitMs: waitBudgetMs, applied: null };
  const waitMs = Math.min(Number(match[1]) * 1000, waitBudgetMs);
  return { waitMs, applied: `wait=${Math.floor(waitMs / 1000)}` };
}
