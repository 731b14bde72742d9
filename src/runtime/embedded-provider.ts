/**
 * The payment provider `npm start` charges when no real one is configured: the default provider's
 * double on loopback (src/providers/<provider>/embedded.ts), reached through its real connector, so
 * a new user can charge a test card in one command. Configuring a provider (docs/providers.md,
 * "Configuration") switches to it; CHARGEGUARD_PROVIDER_SIMULATOR=off starts no provider at all.
 */
import { providerNames } from '../domain/providers.js';
import { configuredProviderConnectors, type ProviderEnvironment } from '../providers/configured.js';
import type { ProviderConnectors } from '../providers/connectors.js';
import { providerFolders } from '../providers/registry.js';
import { defaultProviderName } from '../service/validation.js';

export interface EmbeddedProvider {
  connectors: ProviderConnectors;
  /** A line for the start banner. */
  summary: string;
  /** Sends the double's signed events to the API's receiver, once the API listens. */
  deliverEventsTo(apiUrl: string): void;
  stop(): Promise<void>;
}

export async function startEmbeddedProvider(env: ProviderEnvironment = process.env): Promise<EmbeddedProvider> {
  const configured = configuredProviderConnectors(env);
  const none = { deliverEventsTo: () => {}, stop: async () => {} };
  const names = providerNames.filter((name) => configured[name] !== undefined);
  if (names.length > 0) {
    return { connectors: configured, summary: names.map((name) => `${providerFolders[name].displayName}, as its settings configure`).join('; '), ...none };
  }
  if (env['CHARGEGUARD_PROVIDER_SIMULATOR'] === 'off') {
    return { connectors: {}, summary: 'none (CHARGEGUARD_PROVIDER_SIMULATOR=off): charges with payment_method are cancelled', ...none };
  }
  const provider = defaultProviderName;
  const double = await providerFolders[provider].startEmbedded();
  return {
    connectors: { [provider]: double.connector },
    summary: double.summary,
    deliverEventsTo: (apiUrl) => double.deliverEventsTo(`${apiUrl}/v1/provider-events/${provider}`),
    stop: () => double.stop(),
  };
}
