import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { describe, expect, inject, it } from 'vitest';
import { fundedTenant, useHarness } from './support/harness.js';
import { exerciseChargeTools } from './support/mcp.js';

const h = useHarness();

describe('MCP over stdio', () => {
  it('a child process serves the tools: create, retry (same charge), read, refund, balance', async () => {
    const stack = inject('stack');
    const tenant = await fundedTenant(h, { label: 'mcp-stdio' });
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
