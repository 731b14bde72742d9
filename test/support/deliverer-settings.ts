import type { DelivererSettings } from '../../src/outbound/deliverer.js';

/** Fast schedule and short bounds, so retries happen within a test; loopback and http allowed (the receivers). */
export const fastDelivererSettings: DelivererSettings = {
  retry: { firstDelayMs: 20, maxDelayMs: 100, windowMs: 60_000 },
  disableAfterFailingMs: 3_600_000,
  leaseMs: 8_000,
  concurrency: 8,
  perEndpointConcurrency: 2,
  pollIntervalMs: 20,
  door: { allowHttp: true, allowLoopback: true, allowPrivate: false, connectTimeoutMs: 2_000, responseTimeoutMs: 5_000, responseMaxBytes: 4_096 },
  claimCoalesceMs: 20,
  keepAlive: { idleMs: 4_000, maxOrigins: 256 },
};
