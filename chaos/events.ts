import { createServer, type Server } from 'node:http';
import { Webhook } from 'standardwebhooks';
import type { LedgerPool } from '../src/ledger/pool.js';
import { createEndpoint, eventsBehindCursor } from '../src/ledger/webhook-endpoints.js';

/**
 * `--events`: the chaos tenant's events delivered to webhook endpoints while workers are killed and
 * PostgreSQL and Temporal restart (docs/webhook-endpoints.md). Receivers on loopback, one of them
 * flaky (every third request answered 500); the verdict counts, per endpoint, the events that
 * never arrived (lost: must be 0), duplicates (allowed, counted), and signatures that did not verify.
 */
export interface EventsVerdict {
  endpoints: number;
  events: number;
  /** Event x endpoint pairs never received with a 2xx answer. */
  lost: number;
  /** Requests beyond the first per endpoint and event id (at least once allows them). */
  duplicates: number;
  /** Requests whose signature did not verify with the endpoint's secret. */
  badSignatures: number;
  /** Deliveries still pending or failed for good when the verdict gave up waiting. */
  pending: number;
  failed: number;
  /** Event committed to first 2xx answer, over every endpoint, milliseconds. */
  lagP50Ms: number | null;
  lagP99Ms: number | null;
}

interface ChaosReceiver {
  endpointId: string;
  secret: string;
  flaky: boolean;
  /** Event id -> times a request carrying it was answered 2xx; and requests in all. */
  delivered: Map<string, number>;
  firstDeliveredAtMs: Map<string, number>;
  requests: number;
  badSignatures: number;
  server: Server;
}

/** The settings the worker processes need: loopback http receivers, fast retries, short leases (workers are SIGKILLed). */
export const eventsAppEnv = {
  WEBHOOK_ALLOW_HTTP: 'true',
  WEBHOOK_ALLOW_LOOPBACK: 'true',
  WEBHOOK_RETRY_FIRST_DELAY_MS: '200',
  WEBHOOK_RETRY_MAX_DELAY_MS: '2000',
  WEBHOOK_CONNECT_TIMEOUT_MS: '1000',
  WEBHOOK_RESPONSE_TIMEOUT_MS: '2000',
  WEBHOOK_DELIVERY_LEASE_MS: '5000',
} as const;

export interface ChaosEventReceivers {
  receivers: ChaosReceiver[];
  stop(): Promise<void>;
}

/** Starts `count` receivers (the first flaky) and registers an endpoint for each, subscribed to every event type. */
export async function startEventReceivers(pool: LedgerPool, tenant: string, count = 3): Promise<ChaosEventReceivers> {
  const receivers: ChaosReceiver[] = [];
  for (let index = 0; index < count; index += 1) {
    const flaky = index === 0;
    const receiver = { flaky, delivered: new Map(), firstDeliveredAtMs: new Map(), requests: 0, badSignatures: 0 } as unknown as ChaosReceiver;
    receiver.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        receiver.requests += 1;
        const body = Buffer.concat(chunks).toString('utf8');
        const id = String(request.headers['webhook-id']);
        try {
          new Webhook(receiver.secret).verify(body, request.headers as Record<string, string>);
        } catch {
          receiver.badSignatures += 1;
          response.writeHead(400);
          response.end();
          return;
        }
        if (flaky && receiver.requests % 3 === 0) {
          response.writeHead(500);
          response.end();
          return;
        }
        receiver.delivered.set(id, (receiver.delivered.get(id) ?? 0) + 1);
        if (!receiver.firstDeliveredAtMs.has(id)) receiver.firstDeliveredAtMs.set(id, Date.now());
        response.writeHead(204);
        response.end();
      });
    });
    await new Promise<void>((resolve) => receiver.server.listen(0, '127.0.0.1', resolve));
    const port = (receiver.server.address() as { port: number }).port;
    const { endpoint, secret } = await createEndpoint(pool, { tenant, url: `http://127.0.0.1:${port}/events`, enabledEvents: ['*'], description: flaky ? 'chaos flaky' : 'chaos' }, 16);
    receiver.endpointId = endpoint.id;
    receiver.secret = secret;
    receivers.push(receiver);
  }
  return {
    receivers,
    stop: async () => {
      await Promise.all(
        receivers.map(
          (r) =>
            new Promise<void>((resolve) => {
              r.server.closeAllConnections();
              r.server.close(() => resolve());
            }),
        ),
      );
    },
  };
}

/** Waits (within the budget) until no delivery of the tenant is pending and every endpoint's cursor has passed its events, then counts. */
export async function eventsVerdict(pool: LedgerPool, tenant: string, receivers: ChaosEventReceivers, budgetMs: number): Promise<EventsVerdict> {
  const deadline = Date.now() + budgetMs;
  for (;;) {
    const pending = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM webhook_deliveries WHERE tenant = $1 AND state = 'pending'", [tenant]);
    let behind = 0;
    for (const receiver of receivers.receivers) behind += await eventsBehindCursor(pool, receiver.endpointId);
    if ((pending.rows[0]!.n === 0 && behind === 0) || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  const events = await pool.query<{ id: string; created_ms: number }>(
    'SELECT id, (extract(epoch FROM created_at) * 1000)::float8 AS created_ms FROM events WHERE tenant = $1',
    [tenant],
  );
  const states = await pool.query<{ pending: number; failed: number }>(
    `SELECT count(*) FILTER (WHERE state = 'pending')::int AS pending, count(*) FILTER (WHERE state = 'failed')::int AS failed
       FROM webhook_deliveries WHERE tenant = $1`,
    [tenant],
  );
  let lost = 0;
  let duplicates = 0;
  const lags: number[] = [];
  for (const receiver of receivers.receivers) {
    for (const event of events.rows) {
      const times = receiver.delivered.get(event.id) ?? 0;
      if (times === 0) lost += 1;
      else {
        duplicates += times - 1;
        lags.push(receiver.firstDeliveredAtMs.get(event.id)! - Number(event.created_ms));
      }
    }
  }
  lags.sort((a, b) => a - b);
  const at = (p: number) => (lags.length === 0 ? null : Math.round(lags[Math.min(lags.length - 1, Math.floor(p * lags.length))]!));
  return {
    endpoints: receivers.receivers.length,
    events: events.rows.length,
    lost,
    duplicates,
    badSignatures: receivers.receivers.reduce((sum, r) => sum + r.badSignatures, 0),
    pending: states.rows[0]!.pending,
    failed: states.rows[0]!.failed,
    lagP50Ms: at(0.5),
    lagP99Ms: at(0.99),
  };
}
