import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Consumer, Producer, type Message, type MessagesStream } from '@platformatic/kafka';
import { afterAll, beforeAll } from 'vitest';
import { signMessage } from '../../src/auth/message-signatures.js';
import { intakeSettings, type IntakeSettings } from '../../src/queue/settings.js';
import { startKafkaBroker, type KafkaBroker } from '../../src/stack/kafka.js';
import { lateBound, waitFor } from './harness.js';

/** The broker of one test file: started once before its tests (its start time logged), stopped after them. */
export interface TestKafka {
  broker: KafkaBroker;
  brokers: string[];
  startMs: number;
  /** Stops the broker and starts it again on the same ports and data (the restart test). */
  restart(): Promise<number>;
}

export function useKafka(): TestKafka {
  let state: TestKafka | undefined;
  let dataDir = '';
  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-kafka-'));
    const started = Date.now();
    const broker = await startKafkaBroker({ dataDir, logFilePath: join(dataDir, 'broker.log') });
    const startMs = Date.now() - started;
    process.stderr.write(`kafka broker ${broker.brokers} started in ${startMs} ms\n`);
    const current: TestKafka = {
      broker,
      brokers: [broker.brokers],
      startMs,
      restart: async () => {
        const t0 = Date.now();
        await current.broker.stop();
        current.broker = await startKafkaBroker({ dataDir, logFilePath: join(dataDir, 'broker.log'), port: current.broker.port, controllerPort: current.broker.controllerPort });
        return Date.now() - t0;
      },
    };
    state = current;
  }, 120_000);
  afterAll(async () => {
    await state?.broker.stop();
    if (dataDir !== '') await rm(dataDir, { recursive: true, force: true });
  });
  return lateBound('the Kafka broker', () => state);
}

/** Topic names and a group of a test's own, so tests never read each other's messages. */
export function testIntakeSettings(brokers: string[], overrides: Partial<IntakeSettings> = {}): IntakeSettings {
  const suffix = randomBytes(4).toString('hex');
  return intakeSettings(brokers, {
    groupId: `intake-${suffix}`,
    requestTopic: `requests-${suffix}`,
    resultTopic: `results-${suffix}`,
    deadLetterTopic: `dead-letters-${suffix}`,
    topicPartitions: 2,
    // The broker's smallest allowed session (group.min.session.timeout.ms): a killed consumer's
    // partitions move to the next one as soon as the broker lets them.
    sessionTimeoutMs: 6_000,
    ...overrides,
  });
}

export interface Signer {
  keyId: string;
  secret: string;
}

export interface RawMessage {
  key?: string;
  value: string | Buffer;
  headers?: Record<string, string>;
}

/** A charge request as a producer sends it: key = idempotency key, value = the body, headers = the signature. */
export function signedRequest(topic: string, signer: Signer, idempotencyKey: string, body: unknown, createdSeconds = Math.floor(Date.now() / 1000)): RawMessage {
  const value = typeof body === 'string' ? body : JSON.stringify(body);
  return { key: idempotencyKey, value, headers: signMessage({ keyId: signer.keyId, createdSeconds, topic, key: idempotencyKey, value }, signer.secret) };
}

export async function produce(brokers: string[], topic: string, messages: RawMessage[]): Promise<void> {
  const producer = new Producer({ clientId: 'test-producer', bootstrapBrokers: brokers, idempotent: true, acks: -1 });
  try {
    await producer.send({
      messages: messages.map((m) => ({
        topic,
        ...(m.key !== undefined ? { key: Buffer.from(m.key) } : {}),
        value: Buffer.isBuffer(m.value) ? m.value : Buffer.from(m.value),
        headers: new Map(Object.entries(m.headers ?? {}).map(([k, v]) => [Buffer.from(k), Buffer.from(v)])),
      })),
    });
  } finally {
    await producer.close();
  }
}

export interface Received {
  topic: string;
  key: string;
  value: Record<string, unknown>;
  raw: string;
  headers: Record<string, string>;
}

/**
 * Reads topics from their start into memory, for assertions; `waitForCount` waits on a condition
 * with a deadline. A broker restart ends the client's stream: the reader then reads everything
 * again from the start, with a new consumer.
 */
export class TopicReader {
  messages: Received[] = [];
  private consumer: Consumer<Buffer, Buffer, Buffer, Buffer> | null = null;
  private stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | null = null;
  private closed = false;

  private constructor(
    private readonly brokers: string[],
    private readonly topics: string[],
  ) {}

  static async open(brokers: string[], topics: string[]): Promise<TopicReader> {
    const reader = new TopicReader(brokers, topics);
    await reader.connect();
    return reader;
  }

  private async connect(): Promise<void> {
    const consumer = new Consumer<Buffer, Buffer, Buffer, Buffer>({ clientId: 'test-reader', groupId: `reader-${randomBytes(4).toString('hex')}`, bootstrapBrokers: this.brokers, sessionTimeout: 6_000, heartbeatInterval: 1_000, retries: 10 });
    const stream = await consumer.consume({ topics: this.topics, mode: 'earliest', autocommit: false });
    const messages: Received[] = [];
    this.messages = messages;
    this.consumer = consumer;
    this.stream = stream;
    stream.on('data', (message: Message<Buffer, Buffer, Buffer, Buffer>) => {
      const raw = message.value?.toString('utf8') ?? '';
      const headers: Record<string, string> = {};
      for (const [name, value] of message.headers ?? []) headers[name.toString()] = value.toString();
      messages.push({ topic: message.topic, key: message.key?.toString('utf8') ?? '', value: JSON.parse(raw) as Record<string, unknown>, raw, headers });
    });
    stream.on('error', (error: Error) => {
      if (this.stream !== stream || this.closed) return;
      process.stderr.write(`test reader: stream failed (${error.message}); reading again from the start\n`);
      this.stream = null;
      void consumer.close().catch((closeError: unknown) => process.stderr.write(`test reader: close failed: ${(closeError as Error).message}\n`));
      void this.reconnect();
    });
  }

  private async reconnect(): Promise<void> {
    for (let attempt = 0; attempt < 60 && !this.closed; attempt++) {
      try {
        await this.connect();
        return;
      } catch (error) {
        process.stderr.write(`test reader: reconnect failed (${(error as Error).message})\n`);
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  }

  of(topic: string, key?: string): Received[] {
    return this.messages.filter((m) => m.topic === topic && (key === undefined || m.key === key));
  }

  async waitForCount(topic: string, count: number, key?: string, timeoutMs = 60_000): Promise<Received[]> {
    return waitFor(async () => (this.of(topic, key).length >= count ? this.of(topic, key) : null), { timeoutMs, what: `${count} messages on ${topic}${key ? ` with key ${key}` : ''} (have ${this.of(topic, key).length})` });
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.stream?.close();
    await this.consumer?.close();
  }
}
