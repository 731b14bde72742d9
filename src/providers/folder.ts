/**
 * What a provider's folder (src/providers/<provider>/) gives the rest of the program, besides its
 * connector (src/providers/connector.ts): how it is configured, how its webhooks are signed, and a
 * local double for `npm start`. The registry (src/providers/registry.ts) lists one per provider.
 */
import type { PaymentConnector } from './connector.js';
import type { ProviderEnvironment, ReadSettingFile } from './settings.js';

/** The header a provider signs its webhooks in, as the API's OpenAPI document describes it. */
export interface WebhookSignatureHeader {
  /** As the provider documents it (HTTP compares header names case-insensitively). */
  name: string;
  /** How the signature is checked, for the receiver's description (`Stripe-Signature`, checked against …). */
  checked: string;
  /** The header value's shape. */
  description: string;
  example: string;
}

/** A provider double on loopback, charged through the real connector (src/runtime/embedded-provider.ts). */
export interface EmbeddedProviderDouble {
  connector: PaymentConnector;
  /** A line for the start banner. */
  summary: string;
  /** Sends the double's signed events to the API's receiver at `eventsUrl`, once the API listens. */
  deliverEventsTo(eventsUrl: string): void;
  stop(): Promise<void>;
}

export interface ProviderFolder {
  /** The provider's name as people write it (`Stripe`), for descriptions. */
  displayName: string;
  /**
   * The connector the environment configures; undefined when it configures none. Throws
   * ProviderConfigurationError naming the variable at fault, never repeating a secret.
   */
  connectorFromEnvironment(env: ProviderEnvironment, readFile: ReadSettingFile): PaymentConnector | undefined;
  /** What an operator sets to configure it, for "not configured" messages. */
  settingsHint: string;
  webhookSignature: WebhookSignatureHeader;
  /** Starts the provider's double for a process no real provider is configured for. */
  startEmbedded(): Promise<EmbeddedProviderDouble>;
}
