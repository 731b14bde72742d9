import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMcpServer, type McpDeps } from '../src/mcp/server.js';
import { portableSchema, withoutNulls } from '../src/mcp/portable-schema.js';
import { okResult } from '../src/mcp/tool-results.js';
import { wireChargeSchema } from '../src/service/wire.js';

/**
 * The tools as a client lists them, from the real server over an in-memory transport: no call is
 * made, so the services are never touched.
 */
let tools: Tool[];
let close: () => Promise<void>;
beforeAll(async () => {
  const unused = new Proxy({}, { get: () => () => Promise.reject(new Error('no tool is called in this test')) });
  const server = createMcpServer({ charges: unused, accounts: unused, webhookEndpoints: unused, principal: async () => Promise.reject(new Error('no call')), waitBudgetMs: 1 } as unknown as McpDeps);
  const [serverSide, clientSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'schema-test', version: '1.0.0' });
  await client.connect(clientSide);
  tools = (await client.listTools()).tools;
  close = async () => {
    await client.close();
    await server.close();
  };
});
afterAll(async () => close?.());

/** JSON Schema keywords a portable tool schema may use; anything else is refused by name. */
const portableKeywords = new Set(['$schema', 'type', 'properties', 'required', 'items', 'enum', 'description', 'additionalProperties', 'minimum', 'maximum', 'title']);
const scalarTypes = new Set(['string', 'number', 'integer', 'boolean']);

/** Every construct of `schema` that a client with plain JSON Schema support may not read, by path. */
function portabilityProblems(schema: unknown, path: string, root = true): string[] {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) return [`${path}: not a schema object`];
  const node = schema as Record<string, unknown>;
  const problems: string[] = [];
  for (const keyword of Object.keys(node)) {
    if (!portableKeywords.has(keyword)) problems.push(`${path}: ${keyword}`);
  }
  if (root && node.type !== 'object') problems.push(`${path}: the root's type is ${JSON.stringify(node.type)}, not "object"`);
  if ('$schema' in node && !root) problems.push(`${path}: $schema below the root`);
  if (typeof node.type !== 'string') problems.push(`${path}: type ${JSON.stringify(node.type)} (one type name per node)`);
  if (node.type === 'null') problems.push(`${path}: type null`);
  if (node.enum !== undefined && (!Array.isArray(node.enum) || !node.enum.every((value) => typeof value === node.type))) {
    problems.push(`${path}: enum of values that are not all ${String(node.type)}`);
  }
  if (node.properties !== undefined) {
    if (node.type !== 'object') problems.push(`${path}: properties on a ${String(node.type)}`);
    for (const [name, member] of Object.entries(node.properties as Record<string, unknown>)) problems.push(...portabilityProblems(member, `${path}.${name}`, false));
    const required = (node.required ?? []) as string[];
    for (const name of required) if (!(name in (node.properties as object))) problems.push(`${path}: requires ${name}, which it does not describe`);
  }
  if (node.items !== undefined) problems.push(...portabilityProblems(node.items, `${path}[]`, false));
  const extra = node.additionalProperties;
  // A boolean, or one scalar type for every value (a string-to-string map), nothing more.
  if (extra !== undefined && typeof extra !== 'boolean') {
    const entries = Object.keys(extra as object);
    const valueType = (extra as { type?: unknown }).type;
    if (entries.some((keyword) => keyword !== 'type' && keyword !== 'description') || typeof valueType !== 'string' || !scalarTypes.has(valueType)) {
      problems.push(`${path}: additionalProperties ${JSON.stringify(extra)} (a boolean or one scalar type)`);
    }
  }
  return problems;
}

describe('the MCP tools as a client lists them', () => {
  it('describe every input and output in plain, portable JSON Schema', () => {
    expect(tools.map((tool) => tool.name).sort()).toEqual([
      'cancel_charge',
      'capture_charge',
      'create_charge',
      'create_webhook_endpoint',
      'delete_webhook_endpoint',
      'disable_webhook_endpoint',
      'get_account_balance',
      'get_charge',
      'get_webhook_endpoint',
      'list_events',
      'list_webhook_endpoints',
      'refund_charge',
      'rotate_webhook_endpoint_secret',
      'update_webhook_endpoint',
    ]);
    const problems = tools.flatMap((tool) => [
      ...portabilityProblems(tool.inputSchema, `${tool.name} input`),
      ...(tool.outputSchema === undefined ? [`${tool.name}: no output schema`] : portabilityProblems(tool.outputSchema, `${tool.name} output`)),
    ]);
    expect(problems).toEqual([]);
  });

  it('refuses what clients cannot read (the checker itself)', () => {
    const cases: Array<[string, unknown]> = [
      ['a type array', { type: 'object', properties: { a: { type: ['string', 'null'] } } }],
      ['anyOf with null', { type: 'object', properties: { a: { anyOf: [{ type: 'string' }, { type: 'null' }] } } }],
      ['$ref into $defs', { type: 'object', properties: { a: { $ref: '#/$defs/a' } }, $defs: { a: { type: 'string' } } }],
      ['a const', { type: 'object', properties: { a: { type: 'string', const: 'charge' } } }],
      ['a format', { type: 'object', properties: { a: { type: 'string', format: 'date-time' } } }],
      ['propertyNames', { type: 'object', properties: { a: { type: 'object', propertyNames: { type: 'string' } } } }],
      ['an empty additionalProperties', { type: 'object', properties: { a: { type: 'object', additionalProperties: {} } } }],
      ['a root that is no object', { type: 'string' }],
      ['a node without a type', { type: 'object', properties: { a: { description: 'anything' } } }],
    ];
    for (const [what, schema] of cases) expect(portabilityProblems(schema, 'x'), what).not.toEqual([]);
  });

  it('carry hints true to what each tool does', () => {
    const hints = Object.fromEntries(tools.map((tool) => [tool.name, tool.annotations]));
    expect(hints).toEqual({
      // Adds a charge (never changes one), once per key; a card charge authorizes at Stripe.
      create_charge: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: true },
      // Reads chargeguard's own records only.
      get_charge: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
      get_account_balance: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
      list_events: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
      // Change an existing charge for good; a card charge's authorization is voided or captured at Stripe.
      cancel_charge: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: true },
      capture_charge: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: true },
      // Returns money, once per refund key, at Stripe for a card charge.
      refund_charge: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: true },
      // Read the tenant's endpoints (admin keys only), from chargeguard's own records.
      list_webhook_endpoints: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
      get_webhook_endpoint: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
      // Adds an endpoint once per key; its URL's host is resolved and the tenant's events go there.
      create_webhook_endpoint: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: true },
      // Changes where and what is delivered (a new URL is resolved and checked).
      update_webhook_endpoint: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: true },
      // Stop deliveries, or remove the endpoint and its secrets; the same call again changes nothing more.
      disable_webhook_endpoint: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
      delete_webhook_endpoint: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
      // Each call makes another secret and ends the current ones after the overlap.
      rotate_webhook_endpoint_secret: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    });
  });
});

describe('portable output schemas and the results they describe', () => {
  const wireCharge = {
    id: 'ch_1',
    object: 'charge',
    idempotency_key: 'k',
    status: 'succeeded',
    amount: 100,
    amount_captured: 100,
    amount_refunded: 0,
    currency: 'USD',
    order_id: 'o',
    payer_account_id: 'payer',
    payee_account_id: 'payee',
    capture: 'automatic',
    description: null,
    metadata: null,
    next_action: null,
    provider: { name: 'stripe', payment_id: null, state: null, next_action: null, decline_code: null },
    created_at: '2026-01-01T00:00:00.000Z',
    updated_at: '2026-01-01T00:00:00.000Z',
  };

  it('a tool result leaves null members out, and the portable schema accepts it where the wire schema needs the nulls', () => {
    expect(wireChargeSchema.safeParse(wireCharge).success).toBe(true);
    const { structuredContent } = okResult('ok', { charge: wireCharge, replayed: false });
    const charge = (structuredContent as { charge: Record<string, unknown> }).charge;
    expect(charge).not.toHaveProperty('description');
    expect(charge).not.toHaveProperty('next_action');
    expect(charge.provider).toEqual({ name: 'stripe' });
    expect(portableSchema(wireChargeSchema).safeParse(charge).success).toBe(true);
    expect(wireChargeSchema.safeParse(charge).success).toBe(false);
    // Still checks what it can: a wrong type or an unknown status is refused.
    expect(portableSchema(wireChargeSchema).safeParse({ ...charge, amount: '100' }).success).toBe(false);
    expect(portableSchema(wireChargeSchema).safeParse({ ...charge, status: 'paid' }).success).toBe(false);
    expect(withoutNulls({ a: [null, { b: null, c: 1 }] })).toEqual({ a: [null, { c: 1 }] });
  });

  it('refuses a construct it has no portable form for, rather than passing it through', () => {
    expect(() => portableSchema(z.object({ a: z.union([z.string(), z.number()]) }))).toThrow(/no portable form for a zod union/);
  });
});
