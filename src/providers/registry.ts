/**
 * Every provider folder, by provider name: one line per provider. The type makes it complete: a
 * name in providerNames (src/domain/providers.ts, the list workflow code and the ledger check
 * against) without its folder here does not compile. The first name is the default provider.
 */
import type { ProviderName } from '../domain/providers.js';
import type { ProviderFolder } from './folder.js';
import { stripeProvider } from './stripe/index.js';

export const providerFolders: Readonly<Record<ProviderName, ProviderFolder>> = {
  stripe: stripeProvider,
};
