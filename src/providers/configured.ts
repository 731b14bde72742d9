/**
 * The provider connectors a process builds from its environment (docs/providers.md,
 * "Configuration"): each registered provider reads its own settings (src/providers/registry.ts).
 * Read once at start-up and handed to whatever needs them (the worker's activities, the
 * provider-event receiver, reconciliation): never a global. A typo stops the process at start with
 * the variable's name instead of failing the first charge.
 */
import { readFileSync } from 'node:fs';
import { providerNames, type ProviderName } from '../domain/providers.js';
import type { PaymentConnector } from './connector.js';
import type { ProviderConnectors } from './connectors.js';
import { providerFolders } from './registry.js';
import type { ProviderEnvironment, ReadSettingFile } from './settings.js';

export { ProviderConfigurationError, type ProviderEnvironment } from './settings.js';

/**
 * The connectors the environment configures, by provider: none when it configures none (an empty
 * map: provider charges then fail naming the missing configuration).
 */
export function configuredProviderConnectors(
  env: ProviderEnvironment = process.env,
  readFile: ReadSettingFile = (path) => readFileSync(path, 'utf8'),
): ProviderConnectors {
  const connectors: Partial<Record<ProviderName, PaymentConnector>> = {};
  for (const name of providerNames) {
    const connector = providerFolders[name].connectorFromEnvironment(env, readFile);
    if (connector) connectors[name] = connector;
  }
  return connectors;
}
