import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'vitest';
import { balanceOf, captureCount, chargeBody, expectLedgerInvariants, newKey, type Harness } from './harness.js';

/** An MCP client for the API's /mcp endpoint, with the key (or none); connecting is the caller's. */
export function mcpOverHttp(baseUrl: string, apiKey: string | null): { client: Client; transport: StreamableHTTPClientTransport } {
  const transport = new StreamableHTTPClientTransport(new URL(`${baseUrl}/mcp`), {
    requestInit: { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {} },
  });
  return { client: new Client({ name: 'chargeguard-test', version: '1.0.0' }), transport };
}

export async function callTool(client: Client, name: string, args: Record<string, unknown>): Promise<CallToolResult> {
  return (await client.callTool({ name, arguments: args })) as CallToolResult;
}

export function structured(result: CallToolResult): any {
  expect(result.isError ?? false, JSON.stringify(result.content)).toBe(false);
  return result.structuredContent;
}

/**
 * The conversation both transports must support: list the tools, create a charge, retry it, read
 * it, refund it, and read a balance; a key reused with other arguments is a readable tool error.
 */
export async function exerciseChargeTools(client: Client, h: Harness, tenant: string): Promise<void> {
  const { tools } = await client.listTools();
  const byName = new Map(tools.map((tool) => [tool.name, tool]));
  expect([...byName.keys()].sort()).toEqual(
    [
      'cancel_charge',
      'capture_charge',
      'create_charge',
      'get_account_balance',
      'get_charge',
      'list_events',
      'refund_charge',
      // Listed to every key, refused to all but admin keys (test/mcp-webhook-endpoints.test.ts).
      'list_webhook_endpoints',
      'get_webhook_endpoint',
      'create_webhook_endpoint',
      'update_webhook_endpoint',
      'disable_webhook_endpoint',
      'delete_webhook_endpoint',
      'rotate_webhook_endpoint_secret',
    ].sort(),
  );
  const create = byName.get('create_charge')!;
  expect(create.inputSchema.required).toContain('idempotency_key');
  expect(create.annotations).toMatchObject({ idempotentHint: true, readOnlyHint: false });
  expect(create.description).toMatch(/same idempotency_key/i);
  expect(byName.get('get_charge')!.annotations).toMatchObject({ readOnlyHint: true });
  expect(byName.get('refund_charge')!.inputSchema.required).toEqual(expect.arrayContaining(['idempotency_key', 'refund_idempotency_key']));

  const key = newKey('mcp');
  const args = { idempotency_key: key, ...chargeBody({ amount: 1_500 }) };
  const first = structured(await callTool(client, 'create_charge', args));
  expect(first).toMatchObject({ replayed: false, completed: true, charge: { status: 'succeeded', amount: 1_500 } });
  const retry = structured(await callTool(client, 'create_charge', args));
  expect(retry.replayed).toBe(true);
  expect(retry.charge).toEqual(first.charge);

  const conflict = await callTool(client, 'create_charge', { ...args, amount: 1_501 });
  expect(conflict.isError).toBe(true);
  const conflictText = (conflict.content[0] as { text: string }).text;
  expect(conflictText).toMatch(/^idempotency_conflict/);
  expect(conflictText).toMatch(/new idempotency_key/);
  const invalid = await callTool(client, 'create_charge', { ...args, idempotency_key: newKey(), amount: 0 });
  expect(invalid.isError).toBe(true);
  expect((invalid.structuredContent as any).error.errors).toContainEqual({ field: 'amount', message: 'must be at least 1' });

  const read = structured(await callTool(client, 'get_charge', { idempotency_key: key }));
  expect(read.charge.id).toBe(first.charge.id);
  const missing = await callTool(client, 'get_charge', { idempotency_key: newKey('nobody') });
  expect(missing.isError).toBe(true);
  expect((missing.structuredContent as any).error.type).toBe('not_found');

  const refundKey = newKey('mcp-refund');
  const refund = structured(await callTool(client, 'refund_charge', { idempotency_key: key, refund_idempotency_key: refundKey, amount: 500 }));
  expect(refund.refund).toMatchObject({ status: 'succeeded', amount: 500, charge_id: first.charge.id });
  const refundAgain = structured(await callTool(client, 'refund_charge', { idempotency_key: key, refund_idempotency_key: refundKey, amount: 500 }));
  expect(refundAgain.replayed).toBe(true);
  expect(refundAgain.refund).toEqual(refund.refund);

  const balance = structured(await callTool(client, 'get_account_balance', { account_id: 'payer' }));
  expect(balance.account).toMatchObject({ id: 'payer', posted: 10_000 - 1_500 + 500, available: 10_000 - 1_000 });
  expect(await captureCount(h.pool, tenant, key)).toBe(1);
  expect((await balanceOf(h.pool, tenant, 'payee')).postedMinor).toBe(1_000);
  await expectLedgerInvariants(h.pool, tenant);
}
