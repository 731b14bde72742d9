import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newTenant, openAccount, openHarness, type Harness } from './support/harness.js';
import { openTestApi, type TestApi } from './api-support.js';
import { callTool, exerciseChargeTools } from './mcp-support.js';

let h: Harness;
let api: TestApi;
beforeAll(async () => {
  h = await openHarness();
  api = await openTestApi();
});
afterAll(async () => {
  await api?.close();
  await h?.close();
});

function connect(apiKey: string | null): { client: Client; transport: StreamableHTTPClientTransport } {
  const transport = new StreamableHTTPClientTransport(new URL(`${api.baseUrl}/mcp`), {
    requestInit: { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {} },
  });
  return { client: new Client({ name: 'chargeguard-test', version: '1.0.0' }), transport };
}

describe('MCP over streamable HTTP', () => {
  it('authenticated per tenant: create, retry (same charge), read, refund, balance', async () => {
    const tenant = newTenant('mcp-http');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    const { client, transport } = connect(await api.keyFor(tenant));
    await client.connect(transport);
    try {
      await exerciseChargeTools(client, h, tenant);
    } finally {
      await client.close();
    }
  });

  it("without a key the endpoint is 401; with another tenant's key the charge is not found", async () => {
    const anonymous = connect(null);
    await expect(anonymous.client.connect(anonymous.transport)).rejects.toThrow(/401|unauthor/i);

    const owner = newTenant('mcp-owner');
    await openAccount(h.pool, owner, 'payer', { depositMinor: 1_000 });
    await openAccount(h.pool, owner, 'payee');
    const ownerSide = connect(await api.keyFor(owner));
    const intruderSide = connect(await api.keyFor(newTenant('mcp-intruder')));
    await ownerSide.client.connect(ownerSide.transport);
    await intruderSide.client.connect(intruderSide.transport);
    try {
      const key = 'shared-looking-key';
      const created = await callTool(ownerSide.client, 'create_charge', {
        idempotency_key: key, order_id: 'o-1', payer_account_id: 'payer', payee_account_id: 'payee', amount: 100, currency: 'USD',
      });
      expect(created.isError ?? false).toBe(false);
      const peek = await callTool(intruderSide.client, 'get_charge', { idempotency_key: key });
      expect(peek.isError).toBe(true);
      expect((peek.structuredContent as any).error.type).toBe('not_found');
      const cancel = await callTool(intruderSide.client, 'cancel_charge', { idempotency_key: key });
      expect(cancel.isError).toBe(true);
    } finally {
      await ownerSide.client.close();
      await intruderSide.client.close();
    }
  });
});
