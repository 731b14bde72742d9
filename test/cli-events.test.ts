import { describe, expect, it } from 'vitest';
import { runCli as cli } from './support/cli.js';
import { chargeBody, fundedTenant, newKey, useHarness } from './support/harness.js';

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
});
