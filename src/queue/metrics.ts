import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { MessageOutcome } from './intake.js';

/**
 * Prometheus metrics of one `chargeguard consume` process (its /metrics): what each message came
 * to, the retries, the messages in flight, and the consumer group's lag per partition.
 */
export class IntakeMetrics {
  readonly registry = new Registry();
  /** outcome: a charge status (succeeded, declined, …), `refused` or `dead_letter`; reason: the refusal's code or the dead letter's reason. */
  readonly messages: Counter<'outcome' | 'reason'>;
  readonly retries: Counter;
  readonly inFlight: Gauge;
  readonly reconnects: Counter;
  private lagReader: (() => Promise<Map<number, bigint>>) | null = null;

  constructor(options: { defaultMetrics?: boolean } = {}) {
    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
    const registers = [this.registry];
    this.messages = new Counter({
      name: 'chargeguard_intake_messages_total',
      help: 'intake messages decided, by outcome: the charge status published, refused (a result with a problem), or dead_letter',
      labelNames: ['outcome', 'reason'],
      registers,
    });
    this.retries = new Counter({
      name: 'chargeguard_intake_retries_total',
      help: 'attempts at an intake message that failed for a reason that may pass (Temporal, the database or the broker away) and were tried again',
      registers,
    });
    this.reconnects = new Counter({
      name: 'chargeguard_intake_reconnects_total',
      help: 'times the consumer stream failed (the broker away or restarted) and the intake rejoined its group',
      registers,
    });
    this.inFlight = new Gauge({ name: 'chargeguard_intake_in_flight', help: 'intake messages being decided in this process', registers });
    const read = () => this.lagReader?.() ?? Promise.resolve(new Map<number, bigint>());
    new Gauge({
      name: 'chargeguard_intake_consumer_lag',
      help: 'messages of the request topic not yet committed by the consumer group, per partition',
      labelNames: ['partition'],
      registers,
      async collect() {
        const lags = await read().catch(() => new Map<number, bigint>());
        this.reset();
        for (const [partition, lag] of lags) this.set({ partition: String(partition) }, Number(lag));
      },
    });
  }

  watchLag(reader: () => Promise<Map<number, bigint>>): void {
    this.lagReader = reader;
  }

  counted(outcome: MessageOutcome): void {
    if (outcome.kind === 'result') this.messages.inc({ outcome: outcome.status, reason: '' });
    else if (outcome.kind === 'refused') this.messages.inc({ outcome: 'refused', reason: outcome.code });
    else this.messages.inc({ outcome: 'dead_letter', reason: outcome.reason });
  }
}

/**
 * Serves `registry` at GET /metrics on `host:port` (loopback by default: metrics are for the
 * operator's scraper on the host, as the API's are). Resolves with the URL and a close function.
 */
export async function serveIntakeMetrics(registry: Registry, host: string, port: number): Promise<{ url: string; close(): Promise<void> }> {
  const { createServer } = await import('node:http');
  const server = createServer((request, response) => {
    if (request.method !== 'GET' || request.url !== '/metrics') {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('only GET /metrics is served here\n');
      return;
    }
    registry.metrics().then(
      (text) => response.writeHead(200, { 'content-type': registry.contentType }).end(text),
      (error: unknown) => response.writeHead(500, { 'content-type': 'text/plain' }).end(`metrics failed: ${(error as Error).message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const address = server.address();
  const bound = typeof address === 'object' && address !== null ? address.port : port;
  return {
    url: `http://${host}:${bound}/metrics`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
