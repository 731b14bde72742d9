/**
 * What webhook endpoints cost (docs/webhook-endpoints.md, Why the ledger is the engine), on a fresh
 * embedded PostgreSQL, nothing else running:
 * 1. what subscribed endpoints cost the transaction that writes an event: one event per
 *    transaction, committed one after another, with 0, 1 and 16 (the most a tenant may have)
 *    subscribed endpoints; since deliveries are read from the events log by a cursor per endpoint,
 *    the writer does no work per endpoint, and the three rows should read alike;
 * 2. the deliverer: events written at a steady rate to one endpoint (a loopback receiver answering
 *    204), the delivery lag (event committed -> receiver got it) p50/p99, and the deliverer's CPU
 *    per delivery.
 * Usage: npm run bench:webhooks [-- --events 1000 --rate 100]
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { migrateLedger } from '../src/ledger/migrate.js';
import { createEndpoint, newEventId } from '../src/ledger/webhook-endpoints.js';
import { WebhookDeliverer } from '../src/outbound/deliverer.js';
import { webhookEndpointToWire } from '../src/service/webhook-endpoints.js';
import { startLedgerPostgres } from '../src/runtime/local-stack.js';

const { values } = parseArgs({ options: { events: { type: 'string', default: '1000' }, rate: { type: 'string', default: '100' } } });
const eventCount = Number(values.events);
const ratePerSecond = Number(values.rate);

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;

async function insertEvent(client: pg.ClientBase, tenant: string): Promise<void> {
  const objectId = `ch_${Math.random().toString(36).slice(2)}`;
  await client.query(
    `INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data) VALUES ($1, $2, 'charge.succeeded', 'charge', $3, 1, $4)`,
    [newEventId(), tenant, objectId, JSON.stringify({ object: { id: objectId, object: 'charge', status: 'succeeded', amount: 2500 } })],
  );
}

const dir = await mkdtemp(join(tmpdir(), 'bench-webhooks-'));
await chmod(dir, 0o711);
const server = await startLedgerPostgres({ dataDir: join(dir, 'pg'), logFilePath: join(dir, 'pg.log') });
const pool = new pg.Pool({ connectionString: server.databaseUrl, max: 8 });
// The server stops at the end with the pool's idle connections still open: said, not thrown.
pool.on('error', (error) => console.error(`idle connection: ${error.message}`));
try {
  await migrateLedger(server.databaseUrl);
  const receiver = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      received.push(Date.now());
      response.writeHead(204);
      response.end();
    });
  });
  const received: number[] = [];
  await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(receiver.address() as { port: number }).port}/hooks`;

  console.log('1. an event per transaction, committed one after another (no work per endpoint runs inside it: the cursors read the log afterwards)');
  console.log('| subscribed endpoints | events | per event p50 ms | p99 ms | mean ms |');
  console.log('|---|---|---|---|---|');
  const client = await pool.connect();
  for (const endpoints of [0, 1, 16]) {
    const tenant = `bench-fanout-${endpoints}`;
    // Endpoints nobody delivers to here: only what they cost the writer is measured.
    for (let i = 0; i < endpoints; i += 1) await createEndpoint(pool, { tenant, url: 'https://8.8.8.8/x', enabledEvents: ['charge.succeeded'], description: null }, 16);
    const times: number[] = [];
    for (let i = 0; i < eventCount + 200; i += 1) {
      const started = performance.now();
      await client.query('BEGIN');
      await insertEvent(client, tenant);
      await client.query('COMMIT');
      if (i >= 200) times.push(performance.now() - started);
    }
    times.sort((a, b) => a - b);
    const mean = times.reduce((a, b) => a + b, 0) / times.length;
    console.log(`| ${endpoints} | ${times.length} | ${percentile(times, 50).toFixed(3)} | ${percentile(times, 99).toFixed(3)} | ${mean.toFixed(3)} |`);
  }

  console.log(`\n2. delivery to one loopback endpoint, ${eventCount} events at ${ratePerSecond}/s (poll 250 ms, as the default)`);
  const tenant = 'bench-deliver';
  const { endpoint } = await createEndpoint(pool, { tenant, url, enabledEvents: ['*'], description: null }, 16);
  const deliverer = new WebhookDeliverer({
    pool,
    settings: {
      retry: { firstDelayMs: 30_000, maxDelayMs: 8 * 3_600_000, windowMs: 3 * 86_400_000 },
      disableAfterFailingMs: 5 * 86_400_000,
      leaseMs: 60_000,
      concurrency: 32,
      perEndpointConcurrency: 4,
      pollIntervalMs: 250,
      door: { allowHttp: true, allowLoopback: true, allowPrivate: false, connectTimeoutMs: 5_000, responseTimeoutMs: 15_000, responseMaxBytes: 65_536 },
      claimCoalesceMs: 50,
      keepAlive: { idleMs: 4_000, maxOrigins: 256 },
    },
    // The bench's events are written by hand (no charge behind them): their stored data is the body.
    render: (row) => ({ id: row.id, object: 'event', type: row.type, created_at: row.created_at, sequence: row.object_sequence, data: row.data }),
    renderEndpoint: webhookEndpointToWire,
    onlyTenants: [tenant],
  });
  const committedAt: number[] = [];
  received.length = 0;
  const cpuBefore = process.cpuUsage();
  deliverer.start();
  const started = Date.now();
  for (let i = 0; i < eventCount; i += 1) {
    const due = started + (i * 1000) / ratePerSecond;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    await client.query('BEGIN');
    await insertEvent(client, tenant);
    await client.query('COMMIT');
    committedAt.push(Date.now());
  }
  const deadline = Date.now() + 120_000;
  while (received.length < eventCount && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  await deliverer.stop();
  const cpu = process.cpuUsage(cpuBefore);
  client.release();
  // Deliveries are not ordered: lag is measured from the delivery records instead of by position.
  const lags = (
    await pool.query<{ lag_ms: number }>(
      `SELECT extract(epoch FROM a.started_at - e.created_at) * 1000 + a.duration_ms AS lag_ms
         FROM webhook_delivery_attempts a JOIN events e ON e.id = a.event_id WHERE a.endpoint_id = $1 AND a.delivered`,
      [endpoint.id],
    )
  ).rows.map((row) => Number(row.lag_ms)).sort((a, b) => a - b);
  console.log('| delivered | lag p50 ms | lag p99 ms | bench process CPU per delivery ms (deliverer + writer + receiver) |');
  console.log('|---|---|---|---|');
  console.log(`| ${lags.length}/${eventCount} | ${percentile(lags, 50).toFixed(1)} | ${percentile(lags, 99).toFixed(1)} | ${((cpu.user + cpu.system) / 1000 / eventCount).toFixed(3)} |`);
  receiver.closeAllConnections();
  receiver.close();
} finally {
  await pool.end();
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
