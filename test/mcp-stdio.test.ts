import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { describe, expect, inject, it } from 'vitest';
import { createApiKey, getApiKey, revokeApiKey } from '../src/auth/api-keys.js';
import { countLedger } from '../src/ledger/reports.js';
import { chargeBody, fundedTenant, newKey, testPayloadSettings, useHarness } from './support/harness.js';
import { callTool, exerciseChargeTools, structured } from './support/mcp.js';

const h = useHarness();

describe('MCP over stdio', () => {
  it('a child process serves the tools: create, retry (same charge), read, refund, balance', async () => {
    const stack = inject('stack');
    const tenant = await fundedTenant(h, { label: 'mcp-stdio' });
    const stderr: string[] = [];
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: ['--import', 'tsx', 'src/cli/main.ts', 'mcp', '--stdio', '--tenant', tenant],
      env: { ...(process.env as Record<string, string>), TEMPORAL_ADDRESS: stack.temporalAddress, DATABASE_URL: stack.databaseUrl, ...testPayloadSettings() },
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
    const client = new Client({ name: 'chargeguard-test', version: '1.0.0' });
    try {
      await client.connect(transport);
      expect(client.getServerVersion()?.name).toBe('chargeguard');
      await exerciseChargeTools(client, h, tenant);
    } catch (error) {
      throw new Error(`${(error as Error).message}\n--- server stderr ---\n${stderr.join('')}`, { cause: error });
    } finally {
      await client.close();
    }
  });

  it('started with an API key, the server checks the key on every call: revoked mid-session, the next call is refused', async () => {
    const stack = inject('stack');
    const tenant = await fundedTenant(h, { label: 'mcp-stdio-key' });
    const { key, record } = await createApiKey(h.pool, tenant, 'stdio agent');
    const stderr: string[] = [];
    const env: Record<string, string> = {
      ...(process.env as Record<string, string>),
      TEMPORAL_ADDRESS: stack.temporalAddress,
      DATABASE_URL: stack.databaseUrl,
      CHARGEGUARD_API_KEY: key,
      ...testPayloadSettings(),
    };
    delete env.CHARGEGUARD_TENANT;
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: ['--import', 'tsx', 'src/cli/main.ts', 'mcp', '--stdio'],
      env,
      stderr: 'pipe',
    });
    transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
    const client = new Client({ name: 'chargeguard-test', version: '1.0.0' });
    try {
      await client.connect(transport);
      const balance = structured(await callTool(client, 'get_account_balance', { account_id: 'payer' }));
      expect(balance.account).toMatchObject({ id: 'payer', posted: 10_000 });
      expect((await getApiKey(h.pool, record.id))!.lastUsedAt).not.toBeNull();

      await revokeApiKey(h.pool, record.id);
      const before = await countLedger(h.pool, tenant);
      const read = await callTool(client, 'get_account_balance', { account_id: 'payer' });
      expect(read.isError).toBe(true);
      expect((read.structuredContent as any).error).toMatchObject({ type: 'unauthorized', detail: expect.stringMatching(/revoked/) });
      const charge = await callTool(client, 'create_charge', { idempotency_key: newKey('after-revoke'), ...chargeBody({ amount: 100 }) });
      expect(charge.isError).toBe(true);
      expect((charge.structuredContent as any).error.type).toBe('unauthorized');
      expect(await countLedger(h.pool, tenant)).toEqual(before);
    } catch (error) {
      throw new Error(`${(error as Error).message}\n--- server stderr ---\n${stderr.join('')}`, { cause: error });
    } finally {
      await client.close();
    }
  });
});
