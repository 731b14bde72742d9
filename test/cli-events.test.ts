import { describe, expect, it } from 'vitest';
import { runCli as cli } from './support/cli.js';
import { chargeBody, fundedTenant, newKey, useHarness } from './support/harness.js';
import { apiKeyFor } from './support/api.js';
import { disabledEndpointEvent } from './support/webhook-events.js';

const h = useHarness();

describe('the CLI: events list and get', () => {
  it('lists a tenant’s events newest first with the API’s filters and refusals, and shows one', { timeout: 300_000 }, async () => {
    const tenant = await fundedTenant(h, { label: 'cli-events' });
    const key = newKey('cli-ev');
    const reply = await h.client.charge(tenant, key, chargeBody({ amount: 700 }));
    expect(reply.charge.status).toBe('succeeded');

    const listed = await cli(['events', 'list', '--tenant', tenant, '--type', 'charge.*', '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.json).toMatchObject({ object: 'list', has_more: false, url: '/v1/events' });
    expect(listed.json.data.map((event: any) => [event.type, event.sequence, event.data.object.id])).toEqual([
      ['charge.succeeded', 2, reply.charge.id],
      ['charge.reserved', 1, reply.charge.id],
    ]);
    const shown = await cli(['events', 'get', listed.json.data[0].id, '--tenant', tenant, '--json']);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.json).toEqual(listed.json.data[0]);

    const human = await cli(['events', 'list', '--tenant', tenant, '--object-id', reply.charge.id]);
    expect(human.stdout).toMatch(/charge\.succeeded\s+ch_\S+ #2\s+succeeded/);
    const refused = await cli(['events', 'list', '--tenant', tenant, '--type', 'charge.exploded', '--json']);
    expect(refused.code).toBe(2);
    expect(refused.json.error.errors.map((e: any) => e.field)).toEqual(['type']);
    const missing = await cli(['events', 'get', 'evt_00000000000000000000000000000000', '--tenant', tenant]);
    expect(missing.code).toBe(3);
  });

  it('with an agent key a webhook_endpoint event does not exist, as through the API; the operator and an admin key see it', { timeout: 300_000 }, async () => {
    const tenant = await fundedTenant(h, { label: 'cli-events-roles' });
    const { endpointId, disabledEventId } = await disabledEndpointEvent(h.pool, tenant);
    const agent = { CHARGEGUARD_API_KEY: await apiKeyFor(h.pool, tenant, 'agent') };
    const admin = { CHARGEGUARD_API_KEY: await apiKeyFor(h.pool, tenant, 'admin') };

    const hidden = await cli(['events', 'list', '--type', 'webhook_endpoint.disabled', '--json'], agent);
    expect(hidden.code, hidden.stderr).toBe(0);
    expect(hidden.json).toMatchObject({ object: 'list', data: [], has_more: false });
    const listed = await cli(['events', 'list', '--limit', '100', '--json'], agent);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.json.data.length).toBeGreaterThan(0);
    expect(JSON.stringify(listed.json)).not.toContain(endpointId);
    const got = await cli(['events', 'get', disabledEventId, '--json'], agent);
    expect(got.code).toBe(3);

    for (const [who, args, env] of [
      ['the operator', ['--tenant', tenant], {}],
      ['an admin key', [], admin],
    ] as const) {
      const seen = await cli(['events', 'list', ...args, '--type', 'webhook_endpoint.*', '--json'], env);
      expect(seen.code, `${who}: ${seen.stderr}`).toBe(0);
      expect(seen.json.data.map((event: any) => event.id), who).toEqual([disabledEventId]);
      const one = await cli(['events', 'get', disabledEventId, ...args, '--json'], env);
      expect(one.code, `${who}: ${one.stderr}`).toBe(0);
      expect(one.json.data.object).toMatchObject({ id: endpointId, status: 'disabled', disabled_reason: 'gone' });
    }
  });
});
