import { ValidationError } from './errors.js';
import { limits } from './limits.js';

/**
 * The rules for the names a caller or an operator chooses (a tenant, a webhook provider), which the
 * authentication, rate-limit and service layers all check: pure, so that any layer may use them.
 */

export function assertTenant(tenant: unknown): string {
  if (typeof tenant !== 'string' || !limits.tenantIdPattern.test(tenant)) {
    throw new ValidationError([{ field: 'tenant', message: 'must match [a-z0-9_-]{1,64}' }]);
  }
  return tenant;
}

/** A webhook provider's name: lower case, as it appears in the callback URL. */
export const providerPattern = /^[a-z0-9][a-z0-9_-]{0,31}$/;
const providerRule = 'lower-case letters, digits, "_" or "-", starting with a letter or digit (1-32 characters)';

export function assertProvider(provider: unknown, field = 'provider'): string {
  if (typeof provider !== 'string' || !providerPattern.test(provider)) {
    throw new ValidationError([{ field, message: `must be ${providerRule}` }]);
  }
  return provider;
}
