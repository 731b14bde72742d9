/**
 * Stripe's settings (docs/providers.md, "Configuration"): STRIPE_API_KEY, STRIPE_WEBHOOK_SECRETS
 * (each also as _FILE), STRIPE_API_BASE and STRIPE_KEY_RETENTION_MS. Every one is checked here, so
 * a typo stops the process at start with the variable's name instead of failing the first charge;
 * no message ever repeats a secret's value.
 */
import { ProviderConfigurationError, secretSetting, type ProviderEnvironment, type ReadSettingFile } from '../settings.js';
import { StripeConnector, stripeKeyRetentionMs, type StripeEndpoint } from './connector.js';

/** Stripe's secret keys (`sk_…`) and restricted keys (`rk_…`), test or live mode. */
const stripeApiKeyPattern = /^(sk|rk)_(test|live)_[A-Za-z0-9_]+$/;
/** A webhook endpoint's signing secret. */
const stripeWebhookSecretPattern = /^whsec_[A-Za-z0-9_+/=-]+$/;
/** More live secrets than this is not a rotation but secrets never retired. */
export const stripeWebhookSecretsMax = 8;

/** STRIPE_API_BASE: where Stripe's API is (the simulator, stripe-mock); Stripe itself when unset. */
function stripeEndpoint(text: string | undefined): StripeEndpoint | undefined {
  if (text === undefined || text === '') return undefined;
  const name = 'STRIPE_API_BASE';
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new ProviderConfigurationError(name, 'must be an http(s) URL such as http://127.0.0.1:12111');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ProviderConfigurationError(name, `must be http or https, not ${url.protocol.slice(0, -1)}`);
  // The SDK adds /v1/... to the host itself: a path, credentials or query here would be ignored silently.
  if ((url.pathname !== '/' && url.pathname !== '') || url.search !== '' || url.hash !== '' || url.username !== '' || url.password !== '') {
    throw new ProviderConfigurationError(name, 'must be a scheme, host and optional port only (no path, query or credentials)');
  }
  const protocol = url.protocol === 'https:' ? 'https' : 'http';
  const port = url.port !== '' ? Number(url.port) : protocol === 'https' ? 443 : 80;
  // URL keeps IPv6 literals bracketed; the SDK passes the host to http.request, which wants them bare.
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  return { host, port, protocol };
}

function webhookSecrets(text: string | undefined, source: string): string[] {
  if (text === undefined) throw new ProviderConfigurationError('STRIPE_WEBHOOK_SECRETS', 'is required with STRIPE_API_KEY: the signing secret(s) of the webhook endpoint, newest first');
  const secrets = text.split(',').map((part) => part.trim());
  secrets.forEach((secret, index) => {
    if (!stripeWebhookSecretPattern.test(secret)) {
      throw new ProviderConfigurationError(source, `entry ${index + 1} of ${secrets.length} is not a webhook signing secret (whsec_…)`);
    }
  });
  if (secrets.length > stripeWebhookSecretsMax) {
    throw new ProviderConfigurationError(source, `lists ${secrets.length} secrets; at most ${stripeWebhookSecretsMax} (retire the expired ones)`);
  }
  if (new Set(secrets).size !== secrets.length) throw new ProviderConfigurationError(source, 'names a secret twice');
  return secrets;
}

/** STRIPE_KEY_RETENTION_MS: only shorter than Stripe's 24 h (a simulator that prunes sooner); longer would resend past a pruned key. */
function keyRetentionMs(text: string | undefined): number | undefined {
  if (text === undefined || text === '') return undefined;
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(value) || value < 1 || value > stripeKeyRetentionMs) {
    throw new ProviderConfigurationError('STRIPE_KEY_RETENTION_MS', `must be a whole number of milliseconds from 1 to ${stripeKeyRetentionMs} (Stripe's 24 h)`);
  }
  return value;
}

/**
 * The Stripe connector the environment configures: when STRIPE_API_KEY (or its _FILE) is set;
 * undefined otherwise, unless another STRIPE_* setting is, which is half a configuration.
 */
export function stripeConnectorFromEnvironment(env: ProviderEnvironment, readFile: ReadSettingFile): StripeConnector | undefined {
  const apiKey = secretSetting(env, 'STRIPE_API_KEY', readFile);
  const secretsText = secretSetting(env, 'STRIPE_WEBHOOK_SECRETS', readFile);
  const secretsSource = env['STRIPE_WEBHOOK_SECRETS_FILE'] ? 'STRIPE_WEBHOOK_SECRETS_FILE' : 'STRIPE_WEBHOOK_SECRETS';
  const endpoint = stripeEndpoint(env['STRIPE_API_BASE']);
  const retention = keyRetentionMs(env['STRIPE_KEY_RETENTION_MS']);
  if (apiKey === undefined) {
    // Half a configuration is a mistake, not "Stripe off": say which half is missing.
    const stray = [secretsText !== undefined ? secretsSource : null, endpoint ? 'STRIPE_API_BASE' : null, retention !== undefined ? 'STRIPE_KEY_RETENTION_MS' : null].filter(
      (name): name is string => name !== null,
    );
    if (stray.length > 0) throw new ProviderConfigurationError('STRIPE_API_KEY', `is required with ${stray.join(', ')}`);
    return undefined;
  }
  const keySource = env['STRIPE_API_KEY_FILE'] ? 'STRIPE_API_KEY_FILE' : 'STRIPE_API_KEY';
  if (!stripeApiKeyPattern.test(apiKey)) {
    throw new ProviderConfigurationError(keySource, 'is not a Stripe secret or restricted key (sk_test_…, sk_live_…, rk_test_…, rk_live_…)');
  }
  return new StripeConnector({
    apiKey,
    webhookSecrets: webhookSecrets(secretsText, secretsSource),
    ...(endpoint ? { endpoint } : {}),
    ...(retention !== undefined ? { keyRetentionMs: retention } : {}),
  });
}
