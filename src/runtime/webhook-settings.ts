import type { ChargeguardConfig } from '../config.js';
import type { DelivererSettings } from '../outbound/deliverer.js';
import { deliveryPruneBatchDefaults, type DeliveryRetention } from '../outbound/delivery-pruner.js';
import type { DoorSettings } from '../outbound/door.js';

/** The outbound door as the configuration sets it (WEBHOOK_ALLOW_*, WEBHOOK_*_TIMEOUT_MS, WEBHOOK_RESPONSE_MAX_BYTES). */
/** The settings the door reads. */
export type DoorConfig = Pick<
  ChargeguardConfig,
  'WEBHOOK_ALLOW_HTTP' | 'WEBHOOK_ALLOW_LOOPBACK' | 'WEBHOOK_ALLOW_PRIVATE_NETWORKS' | 'WEBHOOK_CONNECT_TIMEOUT_MS' | 'WEBHOOK_RESPONSE_TIMEOUT_MS' | 'WEBHOOK_RESPONSE_MAX_BYTES'
>;

export function doorSettingsFromConfig(config: DoorConfig): DoorSettings {
  return {
    allowHttp: config.WEBHOOK_ALLOW_HTTP,
    allowLoopback: config.WEBHOOK_ALLOW_LOOPBACK,
    allowPrivate: config.WEBHOOK_ALLOW_PRIVATE_NETWORKS,
    connectTimeoutMs: config.WEBHOOK_CONNECT_TIMEOUT_MS,
    responseTimeoutMs: config.WEBHOOK_RESPONSE_TIMEOUT_MS,
    responseMaxBytes: config.WEBHOOK_RESPONSE_MAX_BYTES,
  };
}

/** The deliverer as the configuration sets it (docs/webhook-endpoints.md, Settings). */
export function delivererSettingsFromConfig(config: ChargeguardConfig): DelivererSettings {
  return {
    retry: {
      firstDelayMs: config.WEBHOOK_RETRY_FIRST_DELAY_MS,
      maxDelayMs: config.WEBHOOK_RETRY_MAX_DELAY_MS,
      windowMs: config.WEBHOOK_RETRY_WINDOW_MS,
    },
    disableAfterFailingMs: config.WEBHOOK_DISABLE_AFTER_FAILING_MS,
    leaseMs: config.WEBHOOK_DELIVERY_LEASE_MS,
    concurrency: config.WEBHOOK_DELIVERY_CONCURRENCY,
    perEndpointConcurrency: config.WEBHOOK_ENDPOINT_CONCURRENCY,
    pollIntervalMs: config.WEBHOOK_DELIVERY_POLL_MS,
    claimCoalesceMs: config.WEBHOOK_DELIVERY_CLAIM_COALESCE_MS,
    door: doorSettingsFromConfig(config),
    keepAlive: { idleMs: config.WEBHOOK_KEEP_ALIVE_IDLE_MS, maxOrigins: config.WEBHOOK_KEEP_ALIVE_MAX_ORIGINS },
  };
}

/** Retention of finished deliveries as the configuration sets it (WEBHOOK_DELIVERY_RETENTION_MS, WEBHOOK_DELIVERY_PRUNE_INTERVAL_MS). */
export function deliveryRetentionFromConfig(config: Pick<ChargeguardConfig, 'WEBHOOK_DELIVERY_RETENTION_MS' | 'WEBHOOK_DELIVERY_PRUNE_INTERVAL_MS'>): DeliveryRetention {
  return {
    deliveryRetentionMs: config.WEBHOOK_DELIVERY_RETENTION_MS,
    pruneIntervalMs: config.WEBHOOK_DELIVERY_PRUNE_INTERVAL_MS,
    ...deliveryPruneBatchDefaults,
  };
}
