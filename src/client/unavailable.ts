import { isGrpcServiceError, ServiceError } from '@temporalio/client';
import { UnavailableError } from './errors.js';

/** gRPC codes that mean "Temporal could not answer now", not "Temporal said no". */
const grpcUnavailableCodes = new Set([
  4, // DEADLINE_EXCEEDED
  8, // RESOURCE_EXHAUSTED
  14, // UNAVAILABLE
]);

/** Node socket errors and PostgreSQL classes that mean the database could not be reached. */
const socketErrorCodes = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENOTFOUND']);

function grpcCode(error: unknown): number | null {
  if (isGrpcServiceError(error)) return error.code;
  if (error instanceof ServiceError) return grpcCode(error.cause);
  return null;
}

export function isTemporalUnavailable(error: unknown): boolean {
  const code = grpcCode(error);
  if (code !== null) return grpcUnavailableCodes.has(code);
  const message = (error as Error | null)?.message ?? '';
  return /Failed to connect|connection refused|TransportError|tcp connect error/i.test(message);
}

export function isDatabaseUnavailable(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string') {
    if (socketErrorCodes.has(code)) return true;
    // 08: connection exception; 57P: operator intervention (shutdown, cannot connect now); 53: resources.
    if (/^(08|57P|53)/.test(code)) return true;
  }
  const message = (error as Error | null)?.message ?? '';
  return /Connection terminated|timeout exceeded when trying to connect|connect ECONNREFUSED/i.test(message);
}

/** Rethrows infrastructure failures as UnavailableError so every surface answers "retry later" the same way. */
export function asUnavailable(error: unknown): unknown {
  if (isTemporalUnavailable(error)) {
    return new UnavailableError('temporal', 'Temporal is unreachable; retry with the same idempotency key', { cause: error });
  }
  if (isDatabaseUnavailable(error)) {
    return new UnavailableError('database', 'the ledger database is unreachable; retry with the same idempotency key', {
      cause: error,
    });
  }
  return error;
}
