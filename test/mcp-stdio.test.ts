import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { createApiKey, getApiKey, revokeApiKey } from '../src/auth/api-keys.js';
import { readCharge } from '../src/ledger/charges.js';
import { listRefunds } from '../src/ledger/refunds.js';
import { countLedger } from '../src/ledger/reports.js';
import { withoutUrlPassword } from '../src/support/redact.js';
import { chargeBody, fundedTenant, newKey, testPayloadSettings, useHarness } from './support/harness.js';
import { callTool, exerciseChargeTools, structured } from './support/mcp.js';

const h = useHarness();

/** The stdio client config docs/api.md shows (section 5), parsed out of the page itself. */
async function documentedStdioConfig(): Promise<{ command: string; args: string[]; env: Record<string, string> } & Record<string, unknown>> {
  const page = await readFile('docs/api.md', 'utf8');
  const section = page.slice(page.indexOf('## 5. Connect an MCP client'));
  const block = /```json\n([\s\S]*?)\n```/.exec(section)?.[1];
  if (block === undefined) throw new Error('docs/api.md section 5 has no json block');
  return (JSON.parse(block) as { mcpServers: { chargeguard: { command: string; args: string[]; env: Record<string, string> } } }).mcpServers.chargeguard;
}

/** A PGPASSFILE for a URL's credentials, as `start` writes its own (hostname:port:database:username:password). */
async function passwordFileFor(databaseUrl: string): Promise<string> {
  const url = new URL(databaseUrl);
  const field = (text: string) => decodeURIComponent(text).replace(/[\\:]/g, (c) => `\\${c}`);
  const path = join(await mkdtemp(join(tmpdir(), 'chargeguard-pgpass-')), 'postgres.pgpass');
  await writeFile(path, `${field(url.hostname)}:${url.port || '5432'}:${field(url.pathname.slice(1))}:${field(url.username)}:${field(url.password)}\n`, { mode: 0o600 });
  return path;
}

describe('MCP over stdio', () => {
  it('the stdio config in docs/api.md, run as written (the run\'s values for the examples), serves the tools; without its payload keys setting it would not start', async () => {
    const stack = inject('stack');
    const documented = await documentedStdioConfig();
    // Only what a client config has: a command, its arguments and its environment.
    expect(Object.keys(documented).sort()).toEqual(['args', 'command', 'env']);
    expect(Object.keys(documented.env).sort()).toEqual(['CHARGEGUARD_API_KEY', 'CHARGEGUARD_PAYLOAD_KEYS_FILE', 'DATABASE_URL', 'PGPASSFILE', 'TEMPORAL_ADDRESS']);
    // The examples are shaped as `start` prints them: the app role's URL without a password, beside PGPASSFILE.
    expect(documented.env.DATABASE_URL).toMatch(/^postgres:\/\/chargeguard_app@127\.0\.0\.1:\d+\/chargeguard$/);

    const tenant = await fundedTenant(h, { label: 'mcp-stdio-docs' });
    const { key } = await createApiKey(h.pool, tenant, 'documented stdio agent');
    const values: Record<string, string> = {
      TEMPORAL_ADDRESS: stack.temporalAddress,
      DATABASE_URL: withoutUrlPassword(stack.databaseUrl),
      PGPASSFILE: await passwordFileFor(stack.databaseUrl),
      CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFile,
      CHARGEGUARD_API_KEY: key,
    };
    const env = Object.fromEntries(Object.keys(documented.env).map((name) => [name, values[name]!]));
    // The clone's path in place of the page's; the command and the arguments as written.
    const args = documented.args.map((arg) => arg.replace('/path/to/chargeguard', process.cwd()));
    const connect = async (serverEnv: Record<string, string>): Promise<{ client: Client; stderr: () => string }> => {
      const stderr: string[] = [];
      // As a desktop client starts it: the SDK's default environment (PATH, HOME, …) and the config's
      // env only, nothing of this test run's; in a folder of its own, not the clone.
      const transport = new StdioClientTransport({ command: documented.command, args, env: serverEnv, cwd: tmpdir(), stderr: 'pipe' });
      transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
      const client = new Client({ name: 'chargeguard-docs-test', version: '1.0.0' });
      try {
        await client.connect(transport);
      } catch (error) {
        await client.close();
        throw new Error(`${(error as Error).message}\n--- server stderr ---\n${stderr.join('')}`, { cause: error });
      }
      return { client, stderr: () => stderr.join('') };
    };

    const { client, stderr } = await connect(env);
    try {
      expect(client.getServerVersion()?.name).toBe('chargeguard');
      await exerciseChargeTools(client, h, tenant);
    } catch (error) {
      throw new Error(`${(error as Error).message}\n--- server stderr ---\n${stderr()}`, { cause: error });
    } finally {
      await client.close();
    }

    // What the page showed before: the same config without the payload keys setting does not start.
    const { CHARGEGUARD_PAYLOAD_KEYS_FILE: _keys, ...withoutKeys } = env;
    await expect(connect(withoutKeys)).rejects.toThrow(/CHARGEGUARD_PAYLOAD_KEYS/);
  });

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

  it('acts as its API key: create_charge and refund_charge record the key; started with --tenant alone in a keyed tenant they are refused naming the setting', async () => {
    const tenant = await fundedTenant(h, { label: 'mcp-stdio-acting' });
    const { key, record } = await createApiKey(h.pool, tenant, 'stdio agent');

    // With the key (and --tenant naming its own tenant): the money moves, recorded as the key's.
    await withStdioServer({ CHARGEGUARD_API_KEY: key }, ['--tenant', tenant], async (client) => {
      const chargeKey = newKey('stdio-keyed');
      const charged = structured(await callTool(client, 'create_charge', { idempotency_key: chargeKey, ...chargeBody({ amount: 900 }) }));
      expect(charged.charge).toMatchObject({ status: 'succeeded', amount: 900 });
      expect((await readCharge(h.pool, tenant, chargeKey))!.charge.createdByKeyId).toBe(record.id);
      const refunded = structured(
        await callTool(client, 'refund_charge', { idempotency_key: chargeKey, refund_idempotency_key: newKey('stdio-refund'), amount: 300 }),
      );
      expect(refunded.refund).toMatchObject({ status: 'succeeded', amount: 300 });
      expect((await listRefunds(h.pool, tenant, chargeKey)).map((refund) => refund.createdByKeyId)).toEqual([record.id]);
    });

    // Without a key, in this tenant that has one: reads work, money movements are refused before
    // anything starts, and the error names the setting.
    const stderr = await withStdioServer({}, ['--tenant', tenant], async (client) => {
      const balance = structured(await callTool(client, 'get_account_balance', { account_id: 'payer' }));
      expect(balance.account).toMatchObject({ id: 'payer', posted: 10_000 - 900 + 300 });
      const before = await countLedger(h.pool, tenant);
      const refused: CallToolResult = await callTool(client, 'create_charge', { idempotency_key: newKey('stdio-keyless'), ...chargeBody({ amount: 100 }) });
      expect(refused.isError).toBe(true);
      expect((refused.structuredContent as any).error).toMatchObject({
        type: 'unauthorized',
        retry: 'do_not_retry',
        detail: expect.stringMatching(/CHARGEGUARD_API_KEY/),
      });
      expect(await countLedger(h.pool, tenant)).toEqual(before);
    });
    expect(stderr).toMatch(/has API keys: without one, create_charge and refund_charge are refused/);
  });
});

/** Runs `chargeguard mcp --stdio` with the given settings around `body`; returns what it wrote to stderr. */
async function withStdioServer(env: Record<string, string>, args: string[], body: (client: Client) => Promise<void>): Promise<string> {
  const stack = inject('stack');
  const stderr: string[] = [];
  const processEnv: Record<string, string> = { ...(process.env as Record<string, string>), TEMPORAL_ADDRESS: stack.temporalAddress, DATABASE_URL: stack.databaseUrl, ...testPayloadSettings(), ...env };
  delete processEnv.CHARGEGUARD_TENANT;
  if (!('CHARGEGUARD_API_KEY' in env)) delete processEnv.CHARGEGUARD_API_KEY;
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: ['--import', 'tsx', 'src/cli/main.ts', 'mcp', '--stdio', ...args],
    env: processEnv,
    stderr: 'pipe',
  });
  transport.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk.toString()));
  const client = new Client({ name: 'chargeguard-test', version: '1.0.0' });
  try {
    await client.connect(transport);
    await body(client);
  } catch (error) {
    throw new Error(`${(error as Error).message}\n--- server stderr ---\n${stderr.join('')}`, { cause: error });
  } finally {
    await client.close();
  }
  return stderr.join('');
}
