/**
 * What one webhook delivery costs the database and the deliverer's process, this tree's deliverer
 * against an older checkout's, in the same run. Not part of `npm run bench`: run it with
 * `npx tsx bench/experiments/delivery-profile.ts <checkout of the older commit> [rounds]`
 * (the checkout needs its src/ and a node_modules; `git archive <commit> src package.json` into a
 * folder and a node_modules symlink to this tree's is enough: only its deliverer module is loaded).
 *
 * One fresh embedded PostgreSQL migrated with this tree's migrations and ledger functions (the older
 * deliverer only uses tables both share). Per round, three phases alternated so the machine's load
 * falls on each alike, each on a tenant of its own with one endpoint subscribed to everything, a
 * loopback receiver in this process answering 204: `base` writes events with no endpoint and no
 * deliverer (what the writing costs), `A` writes the same events with the older deliverer running,
 * `B` with this tree's. The older deliverer reads delivery rows made by the fan-out trigger, which
 * migration 370 dropped for the endpoints' cursors: `A` runs with the trigger re-created for its
 * phase (its cost, in the writers' transactions, is part of what it measures), and with the index
 * by event that migration 361 dropped, as its commit had them (so A's commit must be from before
 * migration 370, and after migration 350). Events are inserted one per statement at RATE a second
 * for PHASE_MS, then the phase waits until every one is delivered. Per
 * phase: PostgreSQL CPU (every backend, from /proc) and this process's CPU, each less the base phase
 * of the same round, per delivery; and the deliverer's statements (round trips on its own pool) per
 * delivery. CPU figures are at 10 ms tick resolution; read the ratios, and the load beside them.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { createEndpoint, newEventId } from '../../src/ledger/webhook-endpoints.js';
import type { DelivererOptions, DelivererSettings } from '../../src/outbound/deliverer.js';
import { WebhookDeliverer } from '../../src/outbound/deliverer.js';
import { statementProfileSettings, startLedgerPostgresWith } from '../lib/postgres-with-settings.js';
import { webhookEndpointToWire } from '../../src/service/webhook-endpoints.js';
import { takeCpuSnapshot } from '../lib/cpu.js';

const olderTree = process.argv[2];
if (!olderTree) throw new Error('usage: delivery-profile.ts <checkout of the older commit> [rounds]');
const rounds = Number(process.argv[3] ?? 3);
const ratePerSecond = Number(process.env.RATE ?? 60);
const phaseMs = Number(process.env.PHASE_MS ?? 8_000);
/** PROFILE=1: also the statements (nested ones included) that took the most server time per delivery, per phase; counting them slows the server a little. */
const statementProfile = process.env.PROFILE === '1';
/** A phase whose deliveries are not all made this long after its last event fails the run, milliseconds. */
const drainBudgetMs = 60_000;

/** The stored event as it is (its object is made up here, so the API's rendering of a charge does not apply). */
const render: DelivererOptions['render'] = (row) => ({ id: row.id, object: 'event', type: row.type, created_at: row.created_at, sequence: row.object_sequence, data: row.data });

type DelivererClass = new (options: DelivererOptions) => { start(): void; stop(): Promise<void> };
const older = (await import(resolve(olderTree, 'src/outbound/deliverer.ts'))) as { WebhookDeliverer: DelivererClass };

/** The production defaults (WEBHOOK_*), loopback http allowed. */
const settings: DelivererSettings = {
  retry: { firstDelayMs: 30_000, maxDelayMs: 8 * 3_600_000, windowMs: 3 * 86_400_000 },
  disableAfterFailingMs: 5 * 86_400_000,
  leaseMs: 60_000,
  concurrency: 32,
  perEndpointConcurrency: 4,
  pollIntervalMs: 250,
  door: { allowHttp: true, allowLoopback: true, allowPrivate: false, connectTimeoutMs: 5_000, responseTimeoutMs: 15_000, responseMaxBytes: 65_536 },
  claimCoalesceMs: 50,
  keepAlive: { idleMs: 4_000, maxOrigins: 256 },
};

const dir = await mkdtemp(join(tmpdir(), 'delivery-profile-'));
await chmod(dir, 0o711);
const serverOptions = { dataDir: join(dir, 'pg'), logFilePath: join(dir, 'pg.log') };
const server = await startLedgerPostgresWith(serverOptions, statementProfile ? statementProfileSettings : {});
const received = { count: 0 };
const receiver = createServer((request, response) => {
  request.resume();
  request.on('end', () => {
    received.count += 1;
    response.writeHead(204);
    response.end();
  });
});
await new Promise<void>((done) => receiver.listen(0, '127.0.0.1', done));
const url = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hooks`;

try {
  await migrateLedger(server.databaseUrl);
  const writer = createLedgerPool({ databaseUrl: server.databaseUrl, maxConnections: 2 });
  // The deliverer's own pool, as the worker gives it one; every statement on it is counted.
  const delivererPool = createLedgerPool({ databaseUrl: server.databaseUrl, maxConnections: 4 });
  let statements = 0;
  delivererPool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      statements += 1;
      return query(...args);
    };
  });
  if (statementProfile) await writer.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  await writer.query('ANALYZE');

  const insertEvent = (tenant: string, i: number) => {
    const objectId = `ch_profile_${i}`;
    return writer.query(
      `INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data) VALUES ($1, $2, 'charge.succeeded', 'charge', $3, 1, $4)`,
      [newEventId(), tenant, objectId, JSON.stringify({ object: { id: objectId, object: 'charge', status: 'succeeded', amount: 2500, currency: 'USD' } })],
    );
  };

  type Side = 'base' | 'A' | 'B';
  const results: Record<Side, Array<{ pgMs: number; nodeMs: number; statements: number; deliveries: number; load: string }>> = { base: [], A: [], B: [] };
  // The older commit's schema: the fan-out trigger (dropped by migration 370) and an index by event
  // on webhook_deliveries (dropped by migration 361), for A's phase only.
  const olderSchema = [
    'CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id)',
    `CREATE FUNCTION webhook_endpoints_fan_out() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
       INSERT INTO webhook_deliveries (endpoint_id, event_id, tenant)
       SELECT e.id, NEW.id, NEW.tenant FROM webhook_endpoints e
        WHERE e.tenant = NEW.tenant AND e.disabled_at IS NULL AND (NEW.type = ANY (e.enabled_events) OR '*' = ANY (e.enabled_events));
       RETURN NULL;
     END $$`,
    'CREATE TRIGGER events_fan_out_to_webhook_endpoints AFTER INSERT ON events FOR EACH ROW EXECUTE FUNCTION webhook_endpoints_fan_out()',
  ];
  const thisSchema = ['DROP TRIGGER events_fan_out_to_webhook_endpoints ON events', 'DROP FUNCTION webhook_endpoints_fan_out()', 'DROP INDEX webhook_deliveries_by_event'];
  const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

  for (let round = 1; round <= rounds; round += 1) {
    for (const side of ['base', 'A', 'B'] as const) {
      const tenant = `profile-${side}-${round}`;
      if (side === 'A') for (const statement of olderSchema) await writer.query(statement);
      if (side !== 'base') await createEndpoint(writer, { tenant, url, enabledEvents: ['*'], description: null }, 16);
      const Deliverer: DelivererClass | null = side === 'A' ? older.WebhookDeliverer : side === 'base' ? null : WebhookDeliverer;
      const deliverer = Deliverer === null ? null : new Deliverer({ pool: delivererPool, settings, render, renderEndpoint: webhookEndpointToWire, onlyTenants: [tenant], log: (line) => console.error(`${side}: ${line}`) });
      const receivedBefore = received.count;
      const load = loadavg()[0]!.toFixed(2);
      deliverer?.start();
      statements = 0;
      if (statementProfile) await writer.query('SELECT pg_stat_statements_reset()');
      const before = await takeCpuSnapshot({ temporal: null, postgres: server.pid, worker: null });
      const events = Math.round((ratePerSecond * phaseMs) / 1000);
      const started = performance.now();
      for (let i = 0; i < events; i += 1) {
        const due = started + (i * 1000) / ratePerSecond;
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
        await insertEvent(tenant, i);
      }
      if (deliverer !== null) {
        const deadline = Date.now() + drainBudgetMs;
        // The receiver's count, not the ledger's: a delivery is made when the receiver has it; the
        // record that follows is awaited by stop() below, inside the measured window.
        while (received.count - receivedBefore < events) {
          if (Date.now() > deadline) throw new Error(`${side} round ${round}: ${received.count - receivedBefore} of ${events} delivered after ${drainBudgetMs} ms`);
          await sleep(20);
        }
        await deliverer.stop();
      }
      const after = await takeCpuSnapshot({ temporal: null, postgres: server.pid, worker: null });
      if (side === 'A') for (const statement of thisSchema) await writer.query(statement);
      const recorded = await writer.query<{ n: number }>(`SELECT count(*) FILTER (WHERE state = 'delivered')::int AS n FROM webhook_deliveries WHERE tenant = $1`, [tenant]);
      const expected = side === 'base' ? 0 : events;
      if (recorded.rows[0]!.n !== expected) throw new Error(`${side} round ${round}: ${recorded.rows[0]!.n} deliveries recorded as delivered, not ${expected}`);
      results[side].push({
        pgMs: (after.secondsBy.postgres! - before.secondsBy.postgres!) * 1000,
        nodeMs: (after.secondsBy.bench! - before.secondsBy.bench!) * 1000,
        statements,
        deliveries: side === 'base' ? 0 : events,
        load,
      });
      const r = results[side].at(-1)!;
      console.log(`round ${round} ${side.padEnd(4)} load ${load}: ${events} events in ${((performance.now() - started) / 1000).toFixed(1)} s, PostgreSQL ${r.pgMs.toFixed(0)} ms CPU, this process ${r.nodeMs.toFixed(0)} ms, deliverer statements ${r.statements}`);
      if (statementProfile) {
        const top = await writer.query<{ query: string; calls: string; us: number }>(
          `SELECT regexp_replace(query, '\\s+', ' ', 'g') AS query, calls, total_exec_time * 1000 / $1 AS us
             FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC LIMIT 12`,
          [events],
        );
        for (const row of top.rows) console.log(`  ${row.us.toFixed(1).padStart(8)} us/event  calls/event ${(Number(row.calls) / events).toFixed(2)}  ${row.query.slice(0, 140)}`);
      }
    }
  }

  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  console.log(`\n| side | per delivery: PostgreSQL CPU ms (less base), per round | median | this process CPU ms (less base), median | deliverer statements per delivery | 1-min load at phase start |`);
  console.log('|---|---|---:|---:|---:|---|');
  const perDelivery = (side: Exclude<Side, 'base'>, pick: (x: (typeof results)['A'][number]) => number) =>
    results[side].map((x, i) => (pick(x) - pick(results.base[i]!)) / x.deliveries);
  for (const side of ['A', 'B'] as const) {
    const pgPer = perDelivery(side, (x) => x.pgMs);
    const nodePer = perDelivery(side, (x) => x.nodeMs);
    const stmts = results[side].map((x) => x.statements / x.deliveries);
    console.log(`| ${side === 'A' ? `A (${olderTree}, with its fan-out trigger and index by event)` : 'B (this tree)'} | ${pgPer.map((v) => v.toFixed(3)).join(' ')} | ${median(pgPer).toFixed(3)} | ${median(nodePer).toFixed(3)} | ${median(stmts).toFixed(2)} | ${results[side].map((x) => x.load).join(' ')} |`);
  }
  const ratio = results.B.map((b, i) => (b.pgMs - results.base[i]!.pgMs) / b.deliveries / ((results.A[i]!.pgMs - results.base[i]!.pgMs) / results.A[i]!.deliveries));
  console.log(`\nB ÷ A, PostgreSQL CPU per delivery, per round: ${ratio.map((v) => v.toFixed(2)).join(' ')} (median ${median(ratio).toFixed(2)})`);
  await Promise.all([writer.end(), delivererPool.end()]);
} finally {
  receiver.close();
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
