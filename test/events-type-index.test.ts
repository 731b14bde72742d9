import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { listEventPage, type EventPageQuery } from '../src/ledger/events.js';
import type { LedgerPool } from '../src/ledger/pool.js';
import { eventTypesOf } from '../src/domain/events.js';
import { newTenant, useScratchLedger } from './support/harness.js';

/**
 * GET /v1/events?type=… is served by events_by_type (tenant, type, seq) (migration 1763800000351):
 * the plans PostgreSQL makes for the very SQL the list sends, over a tenant whose rare events lie
 * behind tens of thousands of common ones. A ledger of its own: the events written here by hand
 * name objects no ledger holds, which the outbox invariants (run over every tenant) would rightly
 * report in the shared one.
 */
const h = useScratchLedger();

const commonEvents = 20_000;
const rareEvents = 5;

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Actual Rows'?: number;
  'Rows Removed by Filter'?: number;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
}

function nodesOf(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(nodesOf)];
}

/** The SQL and parameters listEventPage sends for this query, as sent. */
async function sqlOf(tenant: string, query: Omit<EventPageQuery, 'limit' | 'cursor'>): Promise<{ text: string; values: unknown[] }> {
  let sent: { text: string; values: unknown[] } | undefined;
  const recorder = {
    query: async (text: string, values: unknown[]) => {
      sent = { text, values };
      return { rows: [] };
    },
  } as unknown as LedgerPool;
  await listEventPage(recorder, tenant, { ...query, limit: 20, cursor: null });
  return sent!;
}

/** EXPLAIN ANALYZE of that SQL: the scan's nodes, how many rows the scans read, the time. */
async function explain(db: LedgerPool | pg.PoolClient, sql: { text: string; values: unknown[] }) {
  const { rows } = await db.query<{ 'QUERY PLAN': Array<{ Plan: PlanNode; 'Execution Time': number }> }>(
    `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${sql.text}`,
    sql.values,
  );
  const [root] = rows[0]!['QUERY PLAN'];
  const nodes = nodesOf(root!.Plan);
  const scans = nodes.filter((node) => /Scan/.test(node['Node Type']));
  // The rows the scans handed on or filtered out: what the page cost in rows (a bitmap index scan's
  // rows are the heap scan's above it, counted once there).
  const tableScans = scans.filter((node) => node['Node Type'] !== 'Bitmap Index Scan');
  return {
    indexes: scans.map((node) => node['Index Name'] ?? node['Node Type']),
    rowsRead: tableScans.reduce((sum, node) => sum + (node['Actual Rows'] ?? 0) + (node['Rows Removed by Filter'] ?? 0), 0),
    blocks: scans.reduce((sum, node) => sum + (node['Shared Hit Blocks'] ?? 0) + (node['Shared Read Blocks'] ?? 0), 0),
    ms: root!['Execution Time'],
  };
}

describe('GET /v1/events?type=…: a page of a rare type reads its own rows through events_by_type', () => {
  it(`${rareEvents} deposit.credited events behind ${commonEvents} charge.succeeded ones: the index serves type=, <object>.* of a one-type object and an agent's visibility; without it the scan reads the whole tenant`, { timeout: 120_000 }, async () => {
    const tenant = newTenant('events-type-index');
    const other = newTenant('events-type-index-other');
    const insert = (forTenant: string, type: string, objectType: string, count: number) =>
      h.pool.query(
        `INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
         SELECT 'evt_' || md5($1 || $2 || g::text), $1, $2, $3, $3 || '_' || md5($1 || g::text), 1, '{"object": {}}'::jsonb
           FROM generate_series(1, $4::int) AS g`,
        [forTenant, type, objectType, count],
      );
    // The rare events first, so that newest first every common one lies before them; another
    // tenant's rare events after them, which the tenant's index range never touches.
    await insert(tenant, 'deposit.credited', 'deposit', rareEvents);
    await insert(tenant, 'charge.succeeded', 'charge', commonEvents);
    await insert(other, 'deposit.credited', 'deposit', 50);
    await h.pool.query('ANALYZE events');

    const rare = await listEventPage(h.pool, tenant, { type: 'deposit.credited', objectId: null, objectTypes: null, limit: 20, cursor: null });
    expect(rare.events.map((event) => event.type)).toEqual(Array(rareEvents).fill('deposit.credited'));
    expect(rare.events.every((event) => event.tenant === tenant)).toBe(true);
    expect(rare.hasMore).toBe(false);

    // Whether the same SQL without events_by_type reads the whole tenant: for `deposit.*` the unique
    // key (tenant, object_type, object_id, object_sequence) finds the object's rows, then sorts them
    // all (each page sorts every deposit event of the tenant); events_by_type reads them in order.
    const cases: Array<[string, Omit<EventPageQuery, 'limit' | 'cursor'>, boolean]> = [
      ['type=deposit.credited', { type: 'deposit.credited', objectId: null, objectTypes: null }, true],
      ['type=deposit.* (one type)', { type: { object: 'deposit', types: eventTypesOf('deposit') }, objectId: null, objectTypes: null }, false],
      ["type=deposit.credited, an agent's visible objects", { type: 'deposit.credited', objectId: null, objectTypes: ['charge', 'refund', 'deposit'] }, true],
      ['type=webhook_endpoint.disabled (none: an empty page)', { type: 'webhook_endpoint.disabled', objectId: null, objectTypes: null }, true],
    ];
    const lines: string[] = [];
    for (const [label, query, scansTenantWithout] of cases) {
      const sql = await sqlOf(tenant, query);
      const withIndex = await explain(h.pool, sql);
      expect(withIndex.indexes, label).toContain('events_by_type');
      // Its own rows (at most the page and one more), nothing of the 20,000 others.
      expect(withIndex.rowsRead, label).toBeLessThanOrEqual(rareEvents);
      // The same SQL without the index, in a transaction rolled back (this ledger's own).
      const client = await h.pool.connect();
      let without: Awaited<ReturnType<typeof explain>>;
      try {
        await client.query('BEGIN');
        await client.query('DROP INDEX events_by_type');
        without = await explain(client, sql);
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
      expect(without.indexes, label).not.toContain('events_by_type');
      if (scansTenantWithout) expect(without.rowsRead, label).toBeGreaterThanOrEqual(commonEvents);
      lines.push(
        `${label}: with events_by_type ${withIndex.rowsRead} rows, ${withIndex.blocks} blocks, ${withIndex.ms.toFixed(2)} ms; ` +
          `without (${without.indexes.join('+')}) ${without.rowsRead} rows, ${without.blocks} blocks, ${without.ms.toFixed(2)} ms`,
      );
    }
    // The figures, for docs and the issue: how much the index spares a rare type's page.
    console.info(lines.join('\n'));
    // Still there after the rollbacks.
    const index = await h.pool.query("SELECT 1 FROM pg_indexes WHERE indexname = 'events_by_type'");
    expect(index.rowCount).toBe(1);
  });
});
