import { writeFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { clientTypesFor, clientTypesPath } from './lib/client-types.js';
import { offlineOpenApiDocument } from './lib/openapi-offline.js';

/**
 * `npm run generate:client`: regenerates the typed HTTP client's types from the app's OpenAPI
 * document (built offline, no servers needed). Run it after changing a route schema and commit the
 * result; test/client-types-fresh.test.ts compares the file with what a running app serves.
 */
const document = await offlineOpenApiDocument();
const target = resolve(import.meta.dirname, '..', clientTypesPath);
await writeFile(target, await clientTypesFor(document));
console.log(`wrote ${clientTypesPath} (${Object.keys((document.paths ?? {}) as object).length} paths)`);
