/**
 * The provider connectors one process uses, by provider name. Built once at startup from the
 * configuration (or by a test, pointed at the simulator) and handed to whatever needs them: the
 * worker's activities, the webhook receiver, reconciliation. Never a global.
 */
import type { ProviderName } from '../domain/providers.js';
import type { PaymentConnector } from './connector.js';

export type ProviderConnectors = Partial<Readonly<Record<ProviderName, PaymentConnector>>>;

/** The connector for a provider, or a message an operator can act on. */
export function connectorFor(connectors: ProviderConnectors, provider: ProviderName): PaymentConnector {
  const connector = connectors[provider];
  if (!connector) {
    throw new Error(`no ${provider} connector is configured in this process; set its credentials (docs/providers.md, "Configuration")`);
  }
  return connector;
}
