import type { ChargeguardConfig } from '../config.js';
import { closeLedgerPool, createLedgerPool } from '../ledger/pool.js';
import { webhookEndpointToWire } from '../service/webhook-endpoints.js';
import { WebhookDeliverer, type EventRenderer } from '../outbound/deliverer.js';
import { DeliveryPruner } from '../outbound/delivery-pruner.js';
import { renderEvent } from '../service/events.js';
import { delivererSettingsFromConfig, deliveryRetentionFromConfig } from './webhook-settings.js';

/**
 * The deliverer of a worker process (docs/webhook-endpoints.md, Where deliveries run): its own small
 * pool of connections (WEBHOOK_DELIVERY_POOL_CONNECTIONS), so a backlog of deliveries never takes a
 * connection the charges need, and the pruner of finished deliveries past their retention on the
 * same pool. Null when WEBHOOK_DELIVERY=off.
 */
export function startWebhookDeliverer(
  config: ChargeguardConfig,
  databaseUrl: string,
  options: { log: (line: string) => void; render?: EventRenderer; onlyTenants?: readonly string[] },
): { stop(): Promise<void> } | null {
  if (config.WEBHOOK_DELIVERY === 'off') return null;
  const pool = createLedgerPool({ databaseUrl, maxConnections: config.WEBHOOK_DELIVERY_POOL_CONNECTIONS });
  const deliverer = new WebhookDeliverer({
    pool,
    settings: delivererSettingsFromConfig(config),
    render: options.render ?? ((row) => renderEvent(row)),
    renderEndpoint: webhookEndpointToWire,
    log: options.log,
    ...(options.onlyTenants ? { onlyTenants: options.onlyTenants } : {}),
  });
  const pruner = new DeliveryPruner(pool, deliveryRetentionFromConfig(config), { log: options.log });
  deliverer.start();
  pruner.start();
  return {
    stop: async () => {
      await Promise.all([deliverer.stop(), pruner.stop()]);
      await closeLedgerPool(pool);
    },
  };
}
