import type { Client } from '@temporalio/client';

/**
 * Bounds every Temporal call made by `operation`. Without it, an update sent to a charge whose
 * worker is down, or the gRPC client's own retries while the server is away, could hold a
 * request open indefinitely; the client module turns the expired deadline into "unavailable".
 */
export function withTemporalDeadline<T>(temporal: Client, timeoutMs: number, operation: () => Promise<T>): Promise<T> {
  return temporal.withDeadline(Date.now() + timeoutMs, operation);
}
