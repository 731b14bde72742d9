import type { FastifyRequest } from 'fastify';
import { ValidationError } from '../client/errors.js';

export const idempotencyKeyHeader = 'Idempotency-Key';

/** The Idempotency-Key header, or null when absent; the client module judges its shape. */
export function idempotencyKeyOf(request: FastifyRequest): string | null {
  const value = request.headers['idempotency-key'];
  if (Array.isArray(value)) {
    throw new ValidationError([{ field: idempotencyKeyHeader, message: 'must be sent once' }]);
  }
  return value ?? null;
}

export function requireIdempotencyKey(request: FastifyRequest): string {
  const key = idempotencyKeyOf(request);
  if (key === null || key === '') {
    throw new ValidationError([
      { field: idempotencyKeyHeader, message: 'is required: 1-255 visible ASCII characters, reused verbatim on every retry' },
    ]);
  }
  return key;
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
