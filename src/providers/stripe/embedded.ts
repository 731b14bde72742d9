/**
 * The stateful Stripe simulator on loopback, reached through the official SDK exactly as Stripe is,
 * so `npm start` can charge a test card (`pm_card_visa`) in one command.
 */
import { randomBytes } from 'node:crypto';
import type { EmbeddedProviderDouble } from '../folder.js';
import { StripeConnector } from './connector.js';
import { StripeSimulator } from './simulator/server.js';

export async function startEmbeddedStripeSimulator(): Promise<EmbeddedProviderDouble> {
  const simulator = await StripeSimulator.start({ port: 0 });
  // A secret of this run only: the simulator signs with it and the receiver verifies with it.
  const webhookSecret = `whsec_${randomBytes(24).toString('hex')}`;
  const connector = new StripeConnector({ apiKey: 'sk_test_chargeguard_simulator', webhookSecrets: [webhookSecret], endpoint: simulator.endpoint });
  return {
    connector,
    summary: `the Stripe simulator at ${simulator.url} (test cards such as pm_card_visa; STRIPE_API_KEY switches to Stripe)`,
    deliverEventsTo: (eventsUrl) => simulator.configureWebhooks({ url: eventsUrl, secrets: [webhookSecret] }),
    stop: () => simulator.stop(),
  };
}
