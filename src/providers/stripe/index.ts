/**
 * Stripe, as the registry (src/providers/registry.ts) sees it: everything Stripe-specific lives in
 * this folder (connector, settings, decline codes, event decoder, simulator, stripe-mock starter).
 */
import type { ProviderFolder } from '../folder.js';
import { startEmbeddedStripeSimulator } from './embedded.js';
import { stripeConnectorFromEnvironment } from './settings.js';

export const stripeProvider: ProviderFolder = {
  displayName: 'Stripe',
  connectorFromEnvironment: stripeConnectorFromEnvironment,
  settingsHint: 'set STRIPE_API_KEY and STRIPE_WEBHOOK_SECRETS',
  webhookSignature: {
    name: 'Stripe-Signature',
    checked: "`Stripe-Signature`, checked against every configured webhook secret, newest first, with Stripe's 5-minute tolerance",
    description: "Stripe's signature: t=<unix seconds>,v1=<64 hex digits>[,v1=…] (one v1 per live secret during a rotation)",
    example: 't=1764000000,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd',
  },
  startEmbedded: startEmbeddedStripeSimulator,
};
