import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { clientTypesFor, clientTypesPath } from '../scripts/lib/client-types.js';
import { offlineOpenApiDocument } from '../scripts/lib/openapi-offline.js';
import { useApi } from './support/api.js';

const api = useApi();

describe('the typed client cannot drift from the API', () => {
  it('the committed generated types are what the running app\'s /openapi.json generates (else: npm run generate:client)', async () => {
    const served = await api.request('/openapi.json');
    expect(served.status).toBe(200);
    const committed = await readFile(new URL(`../${clientTypesPath}`, import.meta.url), 'utf8');
    const fresh = await clientTypesFor(served.body);
    // A difference means a route schema changed without regenerating: run `npm run generate:client` and commit.
    expect(committed === fresh, `${clientTypesPath} is stale: run \`npm run generate:client\``).toBe(true);
  });

  it('the generator\'s offline document is the one the running app serves', async () => {
    const served = (await api.request('/openapi.json')).body;
    expect(await offlineOpenApiDocument()).toEqual(served);
  });
});
