import { describe, expect, it } from 'vitest';
import { configuredProviderConnectors } from '../src/providers/configured.js';
import { stripeKeyRetentionMs } from '../src/providers/stripe/connector.js';

/** src/providers/configured.ts: connectors from the environment, each setting checked and named. */
const noFiles = (path: string): string => {
  throw Object.assign(new Error(`no file ${path}`), { code: 'ENOENT' });
};
const base = { STRIPE_API_KEY: 'sk_test_abc', STRIPE_WEBHOOK_SECRETS: 'whsec_new,whsec_old' };

describe('provider configuration from the environment', () => {
  it('configures no provider when nothing is set', () => {
    expect(configuredProviderConnectors({}, noFiles)).toEqual({});
  });

  it('configures Stripe from a key and secrets, with the API base and a shorter key retention when given', () => {
    const connectors = configuredProviderConnectors({ ...base, STRIPE_API_BASE: 'http://127.0.0.1:12111', STRIPE_KEY_RETENTION_MS: '60000' }, noFiles);
    expect(connectors.stripe?.provider).toBe('stripe');
    expect(connectors.stripe?.keyRetentionMs).toBe(60_000);
    expect(configuredProviderConnectors(base, noFiles).stripe?.keyRetentionMs).toBe(stripeKeyRetentionMs);
  });

  it('reads the key and the secrets from files, without their trailing newline', () => {
    const files: Record<string, string> = { '/run/key': 'rk_live_abc\n', '/run/secrets': 'whsec_a,whsec_b\n' };
    const connectors = configuredProviderConnectors({ STRIPE_API_KEY_FILE: '/run/key', STRIPE_WEBHOOK_SECRETS_FILE: '/run/secrets' }, (path) => files[path] ?? noFiles(path));
    expect(connectors.stripe).toBeDefined();
  });

  it.each([
    [{ ...base, STRIPE_API_KEY: 'pk_test_abc' }, 'STRIPE_API_KEY: is not a Stripe secret or restricted key'],
    [{ ...base, STRIPE_API_KEY_FILE: '/run/key' }, 'STRIPE_API_KEY: set either STRIPE_API_KEY or STRIPE_API_KEY_FILE, not both'],
    [{ STRIPE_API_KEY_FILE: '/run/missing', STRIPE_WEBHOOK_SECRETS: 'whsec_a' }, 'STRIPE_API_KEY_FILE: cannot read /run/missing: ENOENT'],
    [{ STRIPE_API_KEY: 'sk_test_abc' }, 'STRIPE_WEBHOOK_SECRETS: is required with STRIPE_API_KEY'],
    [{ ...base, STRIPE_WEBHOOK_SECRETS: 'whsec_a,,whsec_b' }, 'STRIPE_WEBHOOK_SECRETS: entry 2 of 3 is not a webhook signing secret'],
    [{ ...base, STRIPE_WEBHOOK_SECRETS: 'whsec_a,whsec_a' }, 'STRIPE_WEBHOOK_SECRETS: names a secret twice'],
    [{ ...base, STRIPE_API_BASE: 'localhost:12111' }, 'STRIPE_API_BASE: must be http or https'],
    [{ ...base, STRIPE_API_BASE: 'not a url' }, 'STRIPE_API_BASE: must be an http(s) URL'],
    [{ ...base, STRIPE_API_BASE: 'http://127.0.0.1:12111/v1' }, 'STRIPE_API_BASE: must be a scheme, host and optional port only'],
    [{ ...base, STRIPE_KEY_RETENTION_MS: '86400001' }, 'STRIPE_KEY_RETENTION_MS: must be a whole number of milliseconds from 1 to 86400000'],
    [{ ...base, STRIPE_KEY_RETENTION_MS: '1.5' }, 'STRIPE_KEY_RETENTION_MS: must be a whole number'],
    [{ STRIPE_WEBHOOK_SECRETS: 'whsec_a' }, 'STRIPE_API_KEY: is required with STRIPE_WEBHOOK_SECRETS'],
  ])('refuses %j naming the variable', (env, message) => {
    expect(() => configuredProviderConnectors(env, noFiles)).toThrow(message);
  });

  it('never repeats a secret in its refusal', () => {
    expect(() => configuredProviderConnectors({ STRIPE_API_KEY: 'pk_live_SECRETVALUE', STRIPE_WEBHOOK_SECRETS: 'whsec_a' }, noFiles)).toThrow(
      expect.objectContaining({ message: expect.not.stringContaining('SECRETVALUE') }),
    );
    expect(() => configuredProviderConnectors({ ...base, STRIPE_WEBHOOK_SECRETS: 'whsec_a,SECRETVALUE' }, noFiles)).toThrow(
      expect.objectContaining({ message: expect.not.stringContaining('SECRETVALUE') }),
    );
  });
});
