import { afterEach } from 'vitest';
import type { DelivererSettings } from '../../src/outbound/deliverer.js';
import { startReceiver, type Receiver } from './receivers.js';

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

/**
 * What a delivery test started (deliverers, receivers), stopped after each test of the file that
 * calls this: `track` registers one, `receiver` starts a receiver and registers it.
 */
export function stoppedAfterEach(): {
  track: <T extends { stop(): Promise<void> }>(running: T) => T;
  receiver: (answer?: Parameters<typeof startReceiver>[0]) => Promise<Receiver>;
} {
  const running: Array<{ stop(): Promise<void> }> = [];
  afterEach(async () => {
    await Promise.all(running.splice(0).map((r) => r.stop()));
  });
  const track = <T extends { stop(): Promise<void> }>(r: T): T => {
    running.push(r);
    return r;
  };
  return {
    track,
    receiver: async (answer) => {
      const r = await startReceiver(answer);
      running.push({ stop: () => r.close() });
      return r;
    },
  };
}
