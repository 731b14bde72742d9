import { describe, expect, it } from 'vitest';
import { newTenant, useHarness } from './support/harness.js';
import { fundedApiTenant, useApi } from './support/api.js';
import { callTool, exerciseChargeTools, mcpOverHttp } from './support/mcp.js';

const h = useHarness();
const api = useApi();
const connect = (apiKey: string | null) => mcpOverHttp(api.baseUrl, apiKey);

describe('MCP over streamable HTTP', () => {
  it('authenticated per tenant: create, retry (same charge), read, refund, balance', async () => {
    const { tenant, apiKey } = await fundedApiTenant(api, { label: 'mcp-http' });
    const { client, transport } = connect(apiKey);
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

    const owner = await fundedApiTenant(api, { label: 'mcp-owner', payerMinor: 1_000 });
    const ownerSide = connect(owner.apiKey);
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
