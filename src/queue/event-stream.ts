import { setTimeout as delay } from 'node:timers/promises';
import { Admin, Producer } from '@platformatic/kafka';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { EventStreamSource, StreamEvent } from '../service/event-stream.js';
import { renderEvent } from '../service/events.js';

/**
 * The event stream (docs/queues.md): every outbound event (the `events` table, written in the same
 * transaction as the change it reports) published to a topic keyed by its object's id, so one
 * object's events keep their order on one partition, by an idempotent producer, at least once. What
 * was acknowledged is recorded per event (event_stream_publications), never as a seq cursor: a
 * transaction with a smaller seq may commit after one with a larger seq. A publisher stopped
 * between the broker's acknowledgement and that record sends those events again on its next start:
 * counted as possible duplicates; the event id is the consumer's deduplication key.
 */
export interface EventStreamSettings {
  brokers: string[];
  /** The topic (created with `partitions` when missing). */
  topic: string;
  partitions: number;
  /** Events claimed and sent per round. */
  batchSize: number;
  /** Wait between rounds that found nothing, in ms. */
  idleIntervalMs: number;
  /** Wait after a failed round (broker or database away), in ms. */
  retryDelayMs: number;
}

export const eventStreamDefaults = {
  topic: 'chargeguard.events',
  partitions: 3,
  batchSize: 200,
  idleIntervalMs: 500,
  retryDelayMs: 2_000,
} as const;

export interface EventStreamHooks {
  /** After the broker acknowledged a batch, before it is recorded (tests stop the publisher here). */
  afterSend?(events: StreamEvent[]): Promise<void> | void;
}

export class EventStreamPublisher {
  private readonly stopping = new AbortController();
  private producer: Producer<Buffer, Buffer, Buffer, Buffer> | null = null;
  private loop: Promise<void> | null = null;
  private readonly published: Counter | null;

  constructor(
    private readonly source: EventStreamSource,
    private readonly settings: EventStreamSettings,
    private readonly options: { log?: (line: string) => void; hooks?: EventStreamHooks; registry?: Registry } = {},
  ) {
    const registers = options.registry ? [options.registry] : [];
    this.published = options.registry ? new Counter({ name: 'chargeguard_event_stream_published_total', help: 'events acknowledged by the broker on the event stream', registers }) : null;
    if (options.registry) {
      const source = this.source;
      new Gauge({
        name: 'chargeguard_event_stream_unpublished',
        help: 'events not yet acknowledged on the event stream',
        registers,
        async collect() {
          this.set((await source.status()).unpublished);
        },
      });
      new Gauge({
        name: 'chargeguard_event_stream_possible_duplicates',
        help: 'events sent to the stream more than once (a publisher stopped between the acknowledgement and its record)',
        registers,
        async collect() {
          this.set((await source.status()).possibleDuplicates);
        },
      });
    }
  }

  private log(line: string): void {
    this.options.log?.(`event stream: ${line}`);
  }

  /** Creates the topic when missing, then publishes in the background until stop(). */
  async start(): Promise<void> {
    const admin = new Admin({ clientId: 'chargeguard-events-admin', bootstrapBrokers: this.settings.brokers, retries: 10 });
    try {
      if (!(await admin.listTopics()).includes(this.settings.topic)) {
        await admin.createTopics({ topics: [this.settings.topic], partitions: this.settings.partitions, replicas: -1 }).catch((error: unknown) => {
          if (!/already exists/i.test(String((error as Error).message) + JSON.stringify((error as { errors?: unknown }).errors ?? ''))) throw error;
        });
      }
    } finally {
      await admin.close();
    }
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.loop;
    await this.producer?.close().catch((error: unknown) => this.log(`closing the producer failed: ${(error as Error).message}`));
    await this.source.release();
  }

  /** One round: claim, send, record. Returns how many were published (tests drive it directly too). */
  async publishOnce(): Promise<number> {
    const events = await this.source.claim(this.settings.batchSize);
    if (events.length === 0) return 0;
    this.producer ??= new Producer({ clientId: 'chargeguard-events', bootstrapBrokers: this.settings.brokers, idempotent: true, acks: -1, retries: 10 });
    try {
      await this.producer.send({
        messages: events.map((event) => ({
          topic: this.settings.topic,
          key: Buffer.from(event.objectId),
          value: Buffer.from(JSON.stringify(wireEvent(event))),
          headers: new Map([
            [Buffer.from('cg-event-id'), Buffer.from(event.id)],
            [Buffer.from('cg-tenant'), Buffer.from(event.tenant)],
            [Buffer.from('cg-event-type'), Buffer.from(event.type)],
          ]),
        })),
      });
    } catch (error) {
      // A producer whose send failed may have lost its sequence numbering: the next round starts a new one.
      const broken = this.producer;
      this.producer = null;
      await broken.close().catch((closeError: unknown) => this.log(`closing a failed producer failed: ${(closeError as Error).message}`));
      throw error;
    }
    await this.options.hooks?.afterSend?.(events);
    await this.source.markPublished(events.map((e) => e.id));
    this.published?.inc(events.length);
    return events.length;
  }

  private async run(): Promise<void> {
    const signal = this.stopping.signal;
    while (!signal.aborted) {
      try {
        if (!(await this.source.tryLock())) {
          // Another process publishes; take over if it stops.
          await delay(this.settings.retryDelayMs, undefined, { signal }).catch(() => undefined);
          continue;
        }
        const count = await this.publishOnce();
        if (count === 0) await delay(this.settings.idleIntervalMs, undefined, { signal }).catch(() => undefined);
      } catch (error) {
        this.log(`a round failed (${(error as Error).message}); again in ${this.settings.retryDelayMs} ms`);
        await this.source.release();
        await delay(this.settings.retryDelayMs, undefined, { signal }).catch(() => undefined);
      }
    }
  }
}

/**
 * The event exactly as GET /v1/events/{id} shows it to an agent key (`{id, object: "event", type,
 * created_at, sequence, data: {object}}`, rendered by src/service/events.ts, the one rendering
 * rule), plus the tenant and the object's type and id, which a stream shared by the tenants of one
 * deployment needs. Who created the object (`created_by_key_id`, shown to admin keys) stays out of a
 * topic that more readers share.
 */
export function wireEvent(event: StreamEvent): Record<string, unknown> {
  const rendered = renderEvent({
    seq: event.seq,
    id: event.id,
    tenant: event.tenant,
    type: event.type,
    object_type: event.objectType,
    object_id: event.objectId,
    object_sequence: event.objectSequence,
    data: event.data as { object: Record<string, unknown> },
    created_at: new Date(event.createdAt),
  });
  return { ...rendered, tenant: event.tenant, object_type: event.objectType, object_id: event.objectId };
}
