/**
 * The payment provider `npm start` charges when no real one is configured: the stateful Stripe
 * simulator on loopback, reached through the official SDK exactly as Stripe is, so a new user can
 * charge a test card (`pm_card_visa`) in one command. Setting STRIPE_API_KEY (and its companions,
 * docs/providers.md "Configuration") switches to Stripe; CHARGEGUARD_PROVIDER_SIMULATOR=off starts
 * no provider at all.
 */
import { randomBytes } from 'node:crypto';
import type { ProviderConnectors } from '../providers/connectors.js';
import { configuredProviderConnectors, type ProviderEnvironment } from '../providers/configured.js';
import { StripeSimulator } from '../providers/stripe/simulator/server.js';
import { StripeConnector } from '../providers/stripe/connector.js';

export interface EmbeddedProvider {
  connectors: ProviderConnectors;
  /** The simulator, when it is the provider; null when the environment configures a real one (or none). */
  simulator: StripeSimulator | null;
  /** A line for the start banner. */
  summary: string;
  /** Sends the simulator's signed events to the API's receiver, once the API listens. */
  deliverEventsTo(apiUrl: string): void;
  stop(): Promise<void>;
}

export async function startEmbeddedProvider(env: ProviderEnvironment = process.env): Promise<EmbeddedProvider> {
  const configured = configuredProviderConnectors(env);
  const none = { simulator: null, deliverEventsTo: () => {}, stop: async () => {} };
  if (configured.stripe) return { connectors: configured, summary: 'Stripe, as STRIPE_API_KEY configures', ...none };
  if (env['CHARGEGUARD_PROVIDER_SIMULATOR'] === 'off') {
    return { connectors: {}, summary: 'none (CHARGEGUARD_PROVIDER_SIMULATOR=off): charges with payment_method are cancelled', ...none };
  }
  const simulator = await StripeSimulator.start({ port: 0 });
  // A secret of this run only: the simulator signs with it and the receiver verifies with it.
  const webhookSecret = `whsec_${randomBytes(24).toString('hex')}`;
  const stripe = new StripeConnector({ apiKey: 'sk_test_chargeguard_simulator', webhookSecrets: [webhookSecret], endpoint: simulator.endpoint });
  return {
    connectors: { stripe },
    simulator,
    summary: `the Stripe simulator at ${simulator.url} (test cards such as pm_card_visa; STRIPE_API_KEY switches to Stripe)`,
    deliverEventsTo: (apiUrl) => simulator.configureWebhooks({ url: `${apiUrl}/v1/provider-events/stripe`, secrets: [webhookSecret] }),
    stop: () => simulator.stop(),
  };
}
