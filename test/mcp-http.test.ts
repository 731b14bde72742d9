import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { chargeBody, newKey, newTenant, useHarness } from './support/harness.js';
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

  it('every tool declares a draft-07 output schema, one object, that its success and its error results both satisfy', async () => {
    const { apiKey } = await fundedApiTenant(api, { label: 'mcp-output-schemas' });
    const { client, transport } = connect(apiKey);
    await client.connect(transport);
    try {
      const { tools } = await client.listTools();
      const ajv = new Ajv({ allErrors: true });
      const validators = new Map(
        tools.map((tool) => {
          expect(tool.outputSchema, tool.name).toMatchObject({ type: 'object', $schema: 'http://json-schema.org/draft-07/schema#' });
          return [tool.name, ajv.compile(tool.outputSchema!)];
        }),
      );
      const seen = new Map<string, Set<boolean>>();
      // The SDK client checks each result against its schema too; this checks with Ajv's draft-07
      // validator directly, and that each tool was seen succeeding and failing.
      const call = async (name: string, args: Record<string, unknown>, expectError: boolean) => {
        const result = await callTool(client, name, args);
        expect(result.isError ?? false, `${name}: ${JSON.stringify(result.structuredContent)}`).toBe(expectError);
        const validate = validators.get(name)!;
        expect(validate(result.structuredContent), `${name}: ${ajv.errorsText(validate.errors)}`).toBe(true);
        seen.set(name, (seen.get(name) ?? new Set()).add(expectError));
        return result.structuredContent as any;
      };

      const manual = newKey('schema-manual');
      await call('create_charge', { idempotency_key: manual, ...chargeBody({ amount: 400, capture: 'manual' }) }, false);
      await call('create_charge', { idempotency_key: newKey('schema-bad'), ...chargeBody({ amount: 0 }) }, true);
      await call('get_charge', { idempotency_key: manual }, false);
      await call('get_charge', { idempotency_key: newKey('schema-none') }, true);
      await call('refund_charge', { idempotency_key: manual, refund_idempotency_key: newKey('schema-refund') }, true);
      await call('capture_charge', { idempotency_key: manual, amount: 300 }, false);
      await call('capture_charge', { idempotency_key: manual, amount: 200 }, true);
      await call('refund_charge', { idempotency_key: manual, refund_idempotency_key: newKey('schema-refund'), amount: 100 }, false);
      await call('cancel_charge', { idempotency_key: manual }, true);
      const toCancel = newKey('schema-cancel');
      await call('create_charge', { idempotency_key: toCancel, ...chargeBody({ amount: 100, capture: 'manual' }) }, false);
      await call('cancel_charge', { idempotency_key: toCancel }, false);
      await call('get_account_balance', { account_id: 'payer' }, false);
      await call('get_account_balance', { account_id: 'nobody' }, true);
      const listed = await call('list_events', { object_id: (await call('get_charge', { idempotency_key: toCancel }, false)).charge.id }, false);
      expect(listed.events.map((event: any) => [event.type, event.sequence])).toEqual([['charge.cancelled', 2], ['charge.reserved', 1]]);
      expect(listed.has_more).toBe(false);
      await call('list_events', { type: 'charge.exploded' }, true);

      // The webhook endpoint tools need an admin key to succeed: test/mcp-webhook-endpoints.test.ts checks
      // each of their successes and errors against its schema the same way.
      const chargeTools = tools.filter((tool) => !tool.name.includes('webhook_endpoint'));
      expect(chargeTools).toHaveLength(7);
      for (const tool of chargeTools) expect([...(seen.get(tool.name) ?? [])].sort(), tool.name).toEqual([false, true]);
    } finally {
      await client.close();
    }
  });
});
