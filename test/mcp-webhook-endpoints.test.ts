import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { newKey, newTenant } from './support/harness.js';
import { useApi } from './support/api.js';
import { callTool, mcpOverHttp, structured } from './support/mcp.js';

// Loopback and http allowed, as the tests on this machine must: the URLs below resolve to 127.0.0.1.
const api = useApi({ env: { WEBHOOK_ALLOW_HTTP: 'true', WEBHOOK_ALLOW_LOOPBACK: 'true' } });

/** Each tool's declared output schema, compiled by Ajv (draft-07), as a client checks results against it. */
async function outputValidators(client: Awaited<ReturnType<typeof connected>>) {
  const { tools } = await client.listTools();
  const ajv = new Ajv({ allErrors: true });
  return new Map(tools.map((tool) => [tool.name, ajv.compile(tool.outputSchema!)]));
}

async function connected(apiKey: string) {
  const { client, transport } = mcpOverHttp(api.baseUrl, apiKey);
  await client.connect(transport);
  return client;
}

describe('the webhook endpoint tools over MCP (admin keys; the same service as /v1/webhook-endpoints)', () => {
  it('create (once per key), list, get, update, disable, rotate, delete; each result satisfies its declared output schema', async () => {
    const tenant = newTenant('mcp-endpoints');
    const client = await connected(await api.keyFor(tenant, 'admin'));
    try {
      const validate = await outputValidators(client);
      const call = async (name: string, args: Record<string, unknown>) => {
        const result = await callTool(client, name, args);
        const valid = validate.get(name)!;
        expect(valid(result.structuredContent), `${name}: ${JSON.stringify(valid.errors)}`).toBe(true);
        return result;
      };

      const key = newKey('mcp-endpoint');
      const args = { idempotency_key: key, url: 'http://127.0.0.1:9/hooks', enabled_events: ['charge.succeeded'], description: 'orders' };
      const created = structured(await call('create_webhook_endpoint', args));
      expect(created).toMatchObject({
        replayed: false,
        webhook_endpoint: { object: 'webhook_endpoint', url: args.url, enabled_events: ['charge.succeeded'], description: 'orders', status: 'enabled' },
      });
      const { id, secret } = created.webhook_endpoint;
      expect(id).toMatch(/^we_[A-Za-z0-9]{24}$/);
      expect(secret).toMatch(/^whsec_/);
      // A retry with the same key and arguments answers the same endpoint and secret; other arguments under it are a conflict.
      const again = structured(await call('create_webhook_endpoint', args));
      expect(again).toEqual({ ...created, replayed: true });
      const conflict = await call('create_webhook_endpoint', { ...args, enabled_events: ['*'] });
      expect(conflict.isError).toBe(true);
      expect((conflict.structuredContent as any).error.type).toBe('idempotency_conflict');

      // The same endpoint as HTTP shows it, never its secret.
      const http = await api.request(`/v1/webhook-endpoints/${id}`, { apiKey: await api.keyFor(tenant, 'admin') });
      expect(http.status, http.text).toBe(200);
      const listed = structured(await call('list_webhook_endpoints', {}));
      expect(listed).toEqual({ webhook_endpoints: [expect.objectContaining({ id })], has_more: false });
      expect(JSON.stringify(listed)).not.toContain(secret);
      const got = structured(await call('get_webhook_endpoint', { id }));
      expect(got.webhook_endpoint).toEqual(listed.webhook_endpoints[0]);
      expect(got.webhook_endpoint).toMatchObject({ id: http.body.id, url: http.body.url, status: http.body.status });
      expect(got.attempts).toEqual([]);

      const updated = structured(await call('update_webhook_endpoint', { id, enabled_events: ['charge.succeeded', 'refund.succeeded'], description: 'orders and refunds' }));
      expect(updated.webhook_endpoint).toMatchObject({ enabled_events: ['charge.succeeded', 'refund.succeeded'], description: 'orders and refunds', status: 'enabled' });
      const disabled = structured(await call('disable_webhook_endpoint', { id }));
      expect(disabled.webhook_endpoint).toMatchObject({ status: 'disabled', disabled_reason: 'requested' });
      // Again: harmless, the same state.
      expect(structured(await call('disable_webhook_endpoint', { id })).webhook_endpoint).toMatchObject({ status: 'disabled', disabled_reason: 'requested' });
      const enabled = structured(await call('update_webhook_endpoint', { id, disabled: false }));
      expect(enabled.webhook_endpoint).toMatchObject({ status: 'enabled' });

      const rotated = structured(await call('rotate_webhook_endpoint_secret', { id, overlap_seconds: 60 }));
      expect(rotated.secret).toMatchObject({ object: 'webhook_endpoint_secret', endpoint_id: id, secret: expect.stringMatching(/^whsec_/) });
      expect(rotated.secret.secret).not.toBe(secret);
      const badOverlap = await call('rotate_webhook_endpoint_secret', { id, overlap_seconds: 604_801 });
      expect(badOverlap.isError).toBe(true);
      expect((badOverlap.structuredContent as any).error.errors).toContainEqual({ field: 'overlap_seconds', message: expect.stringMatching(/at most 604800/) });

      // The service's checks, named by field: a refused URL, an unknown id.
      const refused = await call('update_webhook_endpoint', { id, url: 'https://user:pw@example.com/hooks' });
      expect(refused.isError).toBe(true);
      expect((refused.structuredContent as any).error.errors[0].field).toBe('url');
      const badLimit = await call('get_webhook_endpoint', { id, attempts_limit: 101 });
      expect((badLimit.structuredContent as any).error.errors).toEqual([{ field: 'attempts_limit', message: 'must be a whole number from 1 to 100' }]);
      const badId = await call('get_webhook_endpoint', { id: 'we_\u0007' });
      expect((badId.structuredContent as any).error.errors[0].field).toBe('id');
      const missing = await call('get_webhook_endpoint', { id: 'we_000000000000000000000000' });
      expect((missing.structuredContent as any).error.type).toBe('not_found');

      expect(structured(await call('delete_webhook_endpoint', { id }))).toEqual({ deleted: { id, object: 'webhook_endpoint', deleted: true } });
      expect(structured(await call('list_webhook_endpoints', {}))).toEqual({ webhook_endpoints: [], has_more: false });
      expect((await api.request(`/v1/webhook-endpoints/${id}`, { apiKey: await api.keyFor(tenant, 'admin') })).status).toBe(404);
    } finally {
      await client.close();
    }
  });

  it("an agent key is refused every webhook endpoint tool (forbidden, naming the operation), and sees no tenant's endpoint", async () => {
    const tenant = newTenant('mcp-endpoints-agent');
    const admin = await connected(await api.keyFor(tenant, 'admin'));
    const agent = await connected(await api.keyFor(tenant, 'agent'));
    try {
      const created = structured(
        await callTool(admin, 'create_webhook_endpoint', { idempotency_key: newKey('mcp-endpoint'), url: 'http://127.0.0.1:9/hooks', enabled_events: ['*'] }),
      );
      const id = created.webhook_endpoint.id;
      const calls: Array<[string, Record<string, unknown>]> = [
        ['list_webhook_endpoints', {}],
        ['get_webhook_endpoint', { id }],
        ['create_webhook_endpoint', { idempotency_key: newKey('mcp-endpoint'), url: 'http://127.0.0.1:9/hooks', enabled_events: ['*'] }],
        ['update_webhook_endpoint', { id, description: 'mine now' }],
        ['disable_webhook_endpoint', { id }],
        ['rotate_webhook_endpoint_secret', { id }],
        ['delete_webhook_endpoint', { id }],
      ];
      const validate = await outputValidators(agent);
      for (const [name, args] of calls) {
        const result = await callTool(agent, name, args);
        expect(result.isError, name).toBe(true);
        // Each tool's error result satisfies its declared schema (its successes do in the test above).
        expect(validate.get(name)!(result.structuredContent), `${name}: ${JSON.stringify(validate.get(name)!.errors)}`).toBe(true);
        expect((result.structuredContent as any).error, name).toMatchObject({ type: 'forbidden', operation: 'webhook_endpoints.manage' });
      }
      // Nothing changed.
      const after = structured(await callTool(admin, 'get_webhook_endpoint', { id }));
      const { secret, ...endpoint } = created.webhook_endpoint;
      expect(secret).toMatch(/^whsec_/);
      expect(after.webhook_endpoint).toEqual(endpoint);
    } finally {
      await admin.close();
      await agent.close();
    }
  });
});
