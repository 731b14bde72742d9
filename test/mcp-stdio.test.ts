import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { newTenant, openAccount, openHarness, type Harness } from './support/harness.js';
import { exerciseChargeTools } from './mcp-support.js';

let h: Harness;
beforeAll(async () => {
  h = await openHarness();
});
afterAll(async () => {
  await h?.close();
});

describe('MCP over stdio', () => {
  it('a child process serves the tools: create, retry (same charge), read, refund, balance', async () => {
    const stack = inject('stack');
    const tenant = newTenant('mcp-stdio');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    const stderr: string[] = [];
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: ['--import', 'tsx', 'src/cli/main.ts', 'mcp', '--stdio', '--tenant', tenant],
      env: { ...(process.env as Record<string, string>), TEMPORAL_ADDRESS: stack.temporalAddress, DATABASE_URL: stack.databaseUrl },
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
});
