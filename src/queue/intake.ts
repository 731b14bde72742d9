import { setTimeout as delay } from 'node:timers/promises';
import { Admin, Consumer, Producer, type Message, type MessagesStream } from '@platformatic/kafka';
import { MessageSignatureError, type ReceivedMessage } from '../auth/message-signatures.js';
import { authorize, chargeActorOf, type Principal } from '../auth/principal.js';
import { rateLimitSettingsFrom, type RateLimitSettings } from '../auth/rate-limits.js';
import { problemFor } from '../http/problem.js';
import type { AppContext } from '../runtime/app-context.js';
import type { ChargeReply } from '../service/charge-service.js';
import {
  ChargeStateConflictError,
  ForbiddenError,
  IdempotencyConflictError,
  MandateExceededError,
  NotFoundError,
  RateLimitedError,
  ValidationError,
  type ChargeguardError,
} from '../domain/errors.js';
import { chargeToWire } from '../service/wire.js';
import { decodeStrictJson, StrictJsonError } from '../support/strict-json.js';
import { GroupLag } from './group-lag.js';
import { IntakeMetrics } from './metrics.js';
import type { IntakeSettings } from './settings.js';

/**
 * Queue intake (docs/queues.md): charge requests read from a Kafka topic by a consumer group, each
 * authenticated by the API key that signed it and made through the same service call as
 * `POST /v1/charges` (start-or-attach, then wait for the outcome). The outcome goes to the result
 * topic keyed by the idempotency key; a message that can never be valid goes to the dead-letter
 * topic with its reason and starts nothing. A message's offset is committed only once its outcome
 * (or dead letter) is published, and offsets are committed in order: a crash anywhere replays the
 * undecided messages, whose start-or-attach attaches to the charge already started.
 */

/** What one message came to: counted in the metrics, and what a hook sees. */
export type MessageOutcome = { kind: 'result'; status: string } | { kind: 'refused'; code: string } | { kind: 'dead_letter'; reason: string };

/** A message that will never be valid: dead-lettered with this reason; nothing was started. */
class DeadLetter extends Error {
  constructor(
    readonly reason: string,
    message: string,
    readonly errors?: unknown,
  ) {
    super(message);
  }
}

export interface IntakeHooks {
  /** After the service call was acknowledged and the outcome is known, before anything is published or committed (tests crash here). */
  beforeCommit?(idempotencyKey: string, outcome: MessageOutcome): Promise<void> | void;
}

export interface IntakeOptions {
  /** The services the intake calls, as the API gets them: never the ledger pool. */
  context: Pick<AppContext, 'charges' | 'keys' | 'limits' | 'config'>;
  settings: IntakeSettings;
  log?: (line: string) => void;
  hooks?: IntakeHooks;
  /** Metrics to count into (a registry of the consume process's /metrics); a new one when omitted. */
  metrics?: IntakeMetrics;
}

interface PartitionState {
  /** Offsets delivered and not yet committed, in order, with whether each is done. */
  pending: Map<bigint, { done: boolean; message: Message<Buffer, Buffer, Buffer, Buffer> }>;
  /** A commit of this partition is on its way: the next one waits for it, so commits never go backwards. */
  committing: Promise<void>;
}

type Decision =
  | { publish: 'result'; key: string; tenant: string; value: Record<string, unknown>; outcome: MessageOutcome }
  | { publish: 'dead_letter'; key: string; value: Record<string, unknown>; outcome: MessageOutcome };

/** Refusals the caller must hear about (published as results): the request was valid, the answer is no. */
function isRefusal(error: unknown): error is ChargeguardError {
  return (
    error instanceof MandateExceededError ||
    error instanceof ForbiddenError ||
    error instanceof IdempotencyConflictError ||
    error instanceof ChargeStateConflictError ||
    error instanceof NotFoundError
  );
}

export class ChargeIntake {
  readonly metrics: IntakeMetrics;
  private readonly log: (line: string) => void;
  private consumer: Consumer<Buffer, Buffer, Buffer, Buffer> | null = null;
  private producer: Producer<Buffer, Buffer, Buffer, Buffer> | null = null;
  private groupLag: GroupLag | null = null;
  private stream: MessagesStream<Buffer, Buffer, Buffer, Buffer> | null = null;
  private readonly partitions = new Map<string, PartitionState>();
  private readonly stopping = new AbortController();
  private readonly running = new Set<Promise<void>>();
  private paused = false;
  private reopening = false;
  /** The publish in progress: the next waits for it (see publish). */
  private sending: Promise<void> = Promise.resolve();
  private failure: ((error: Error) => void) | null = null;
  /** Settles when the intake stops on an error it cannot get past (the consume command exits non-zero). */
  readonly failed: Promise<never>;

  private readonly limits: RateLimitSettings;

  constructor(private readonly options: IntakeOptions) {
    this.metrics = options.metrics ?? new IntakeMetrics();
    this.limits = rateLimitSettingsFrom(options.context.config);
    this.log = options.log ?? (() => undefined);
    this.failed = new Promise<never>((_, reject) => {
      this.failure = reject;
    });
    // Only the consume command listens; an intake nobody awaits must not crash the process.
    this.failed.catch(() => undefined);
  }

  /** Creates the three topics if missing, joins the group and starts reading. */
  async start(): Promise<void> {
    const { settings } = this.options;
    await ensureIntakeTopics(settings);
    this.producer = this.newProducer();
    this.groupLag = new GroupLag(settings.brokers, settings.groupId, settings.requestTopic);
    this.metrics.watchLag(() => this.lag());
    await this.openStream();
  }

  /** A consumer in the group and its stream of messages, from the group's last commit. */
  private async openStream(): Promise<void> {
    const { settings } = this.options;
    const consumer = new Consumer<Buffer, Buffer, Buffer, Buffer>({
      clientId: 'chargeguard-intake',
      groupId: settings.groupId,
      bootstrapBrokers: settings.brokers,
      sessionTimeout: settings.sessionTimeoutMs,
      heartbeatInterval: Math.max(500, Math.floor(settings.sessionTimeoutMs / 5)),
      retries: 10,
    });
    try {
      const stream = await consumer.consume({
        topics: [settings.requestTopic],
        // Offsets are committed by this class, one message's outcome at a time, never on a timer.
        autocommit: false,
        mode: 'committed',
        fallbackMode: 'earliest',
      });
      this.consumer = consumer;
      this.stream = stream;
      stream.on('data', (message: Message<Buffer, Buffer, Buffer, Buffer>) => this.accept(message));
      // Only the current stream's error: a closed stream's late one must not tear down its successor.
      stream.on('error', (error: Error) => {
        if (this.stream === stream) void this.reopen(error);
        else this.log(`intake: a replaced stream failed: ${describeError(error)}`);
      });
    } catch (error) {
      await settleWithin(consumer.close(), closeWaitMs, this.log, 'closing a consumer that failed to start');
      throw error;
    }
  }

  /**
   * The stream ends on an error it does not retry (the broker restarted: "leader epoch older than
   * the broker's", the connection refused): a new consumer rejoins the group, with backoff until
   * the broker answers. Messages still in flight from the old stream finish; their commits fail
   * and the new stream delivers them again, where they attach to their charges.
   */
  private async reopen(error: Error): Promise<void> {
    if (this.reopening || this.stopping.signal.aborted) return;
    this.reopening = true;
    this.metrics.reconnects.inc();
    this.log(`intake: the consumer stream failed (${describeError(error)}); rejoining the group`);
    try {
      const oldStream = this.stream;
      const oldConsumer = this.consumer;
      this.stream = null;
      this.consumer = null;
      if (oldStream !== null) await settleWithin(oldStream.close(), closeWaitMs, this.log, 'closing the failed stream');
      if (oldConsumer !== null) await settleWithin(oldConsumer.close(), closeWaitMs, this.log, 'closing the failed consumer');
      this.partitions.clear();
      this.paused = false;
      for (let attempt = 1; !this.stopping.signal.aborted; attempt++) {
        try {
          await this.openStream();
          this.log('intake: rejoined the group');
          return;
        } catch (openError) {
          const waitMs = Math.min(this.options.settings.retryMaxDelayMs, this.options.settings.retryInitialDelayMs * 2 ** Math.min(attempt, 16));
          this.log(`intake: rejoining failed (${describeError(openError)}); again in ${waitMs} ms`);
          await delay(waitMs, undefined, { signal: this.stopping.signal }).catch(() => undefined);
        }
      }
    } finally {
      this.reopening = false;
    }
  }

  /** Stops reading, lets the messages in flight finish (their commits included), then leaves the group. */
  async stop(): Promise<void> {
    this.stopping.abort();
    if (this.stream !== null) await settleWithin(this.stream.close(), closeWaitMs, this.log, 'closing the stream');
    await Promise.allSettled([...this.running]);
    if (this.consumer !== null) await settleWithin(this.consumer.close(), closeWaitMs, this.log, 'closing the consumer');
    if (this.producer !== null) await settleWithin(this.producer.close(), closeWaitMs, this.log, 'closing the producer');
    if (this.groupLag !== null) await settleWithin(this.groupLag.close(), closeWaitMs, this.log, 'closing the lag reader');
  }

  /** Per partition of the request topic, how many messages the group (every consumer of it) has not committed yet. */
  async lag(): Promise<Map<number, bigint>> {
    return this.groupLag === null ? new Map() : this.groupLag.read();
  }

  private newProducer(): Producer<Buffer, Buffer, Buffer, Buffer> {
    return new Producer({
      clientId: 'chargeguard-intake-producer',
      bootstrapBrokers: this.options.settings.brokers,
      // Idempotent: a produce retried after a lost acknowledgement is written once.
      idempotent: true,
      acks: -1,
      retries: 10,
    });
  }

  private partitionOf(message: Message<Buffer, Buffer, Buffer, Buffer>): PartitionState {
    const id = `${message.topic}/${message.partition}`;
    let state = this.partitions.get(id);
    if (state === undefined) {
      state = { pending: new Map(), committing: Promise.resolve() };
      this.partitions.set(id, state);
    }
    return state;
  }

  private accept(message: Message<Buffer, Buffer, Buffer, Buffer>): void {
    const partition = this.partitionOf(message);
    // After a rebalance the stream may deliver again a message still in flight here: it is the same
    // message, already being decided.
    if (partition.pending.has(message.offset)) return;
    partition.pending.set(message.offset, { done: false, message });
    this.metrics.inFlight.inc();
    this.throttle();
    const work = this.decideAndCommit(message, partition).finally(() => {
      this.running.delete(work);
      this.metrics.inFlight.dec();
      this.throttle();
    });
    this.running.add(work);
  }

  /** Pauses the fetch while any partition has its bound of messages in flight; resumes below it. */
  private throttle(): void {
    const stream = this.stream;
    if (stream === null) return;
    let full = false;
    for (const state of this.partitions.values()) {
      let undecided = 0;
      for (const entry of state.pending.values()) if (!entry.done) undecided++;
      if (undecided >= this.options.settings.maxInFlightPerPartition) full = true;
    }
    if (full && !this.paused) {
      this.paused = true;
      stream.pause();
    } else if (!full && this.paused && !this.stopping.signal.aborted) {
      this.paused = false;
      stream.resume();
    }
  }

  private async decideAndCommit(message: Message<Buffer, Buffer, Buffer, Buffer>, partition: PartitionState): Promise<void> {
    let attempt = 0;
    for (;;) {
      try {
        const decision = await this.decide(message);
        await this.options.hooks?.beforeCommit?.(decision.key, decision.outcome);
        await this.publish(message, decision);
        this.metrics.counted(decision.outcome);
        break;
      } catch (error) {
        // Temporal or the database away, the broker unreachable, overload: the message is valid and
        // must be decided; it is tried again (nothing is committed meanwhile, so a crash replays it).
        attempt++;
        this.metrics.retries.inc();
        // Over its key's (or tenant's) request rate or open holds: the message waits as long as the
        // limiter says, as an HTTP caller told 429 with Retry-After would; the queue is the buffer.
        const waitMs =
          error instanceof RateLimitedError
            ? Math.min(rateLimitWaitMaxMs, error.retryAfterSeconds * 1000)
            : Math.min(this.options.settings.retryMaxDelayMs, this.options.settings.retryInitialDelayMs * 2 ** Math.min(attempt, 16));
        this.log(`intake: ${message.topic}/${message.partition}@${message.offset} not decided yet (${describeError(error)}); again in ${waitMs} ms`);
        if (this.stopping.signal.aborted) return;
        await delay(waitMs, undefined, { signal: this.stopping.signal }).catch(() => undefined);
        if (this.stopping.signal.aborted) return;
      }
    }
    const entry = partition.pending.get(message.offset);
    if (entry) entry.done = true;
    await this.commitDone(partition);
  }

  /** Commits the longest run of decided messages at the front of the partition (its last offset + 1). */
  private async commitDone(partition: PartitionState): Promise<void> {
    const next = partition.committing.then(async () => {
      let last: Message<Buffer, Buffer, Buffer, Buffer> | null = null;
      const offsets = [...partition.pending.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
      for (const offset of offsets) {
        const entry = partition.pending.get(offset)!;
        if (!entry.done) break;
        last = entry.message;
      }
      if (last === null) return;
      try {
        await last.commit();
        for (const offset of offsets) {
          if (offset > last.offset) break;
          partition.pending.delete(offset);
        }
      } catch (error) {
        // A rebalance took the partition away: its new owner replays from the last commit, and each
        // replayed message attaches to its charge. Nothing is lost; the work is done again.
        this.log(`intake: committing ${last.topic}/${last.partition}@${last.offset} failed: ${(error as Error).message}`);
        for (const offset of offsets) {
          if (offset > last.offset) break;
          partition.pending.delete(offset);
        }
      }
    });
    partition.committing = next.catch(() => undefined);
    await next;
  }

  /** Authenticates, validates and charges: what to publish. Throws only for what may pass (retried). */
  private async decide(message: Message<Buffer, Buffer, Buffer, Buffer>): Promise<Decision> {
    const key = message.key?.length ? message.key.toString('utf8') : '';
    try {
      if (key === '') throw new DeadLetter('missing_key', 'the message has no key: the key is the idempotency key of the charge');
      const received: ReceivedMessage = { topic: message.topic, key, value: message.value ?? Buffer.alloc(0), headers: headerMap(message.headers) };
      let principal: Principal;
      try {
        principal = await this.options.context.keys.authenticateMessage(received);
      } catch (error) {
        if (error instanceof MessageSignatureError) throw new DeadLetter(error.reason, error.message);
        throw error;
      }
      let body: unknown;
      try {
        body = decodeStrictJson(received.value);
      } catch (error) {
        if (error instanceof StrictJsonError) throw new DeadLetter('malformed_json', `the value is not JSON: ${error.message}`);
        throw error;
      }
      try {
        authorize(principal, 'charges.create');
        // The key's limits, as the API's front door applies them: one request token, and the open
        // holds unless the ledger already knows this key (a redelivery holds nothing new).
        const admission = await this.options.context.limits.admitRequest(this.limits, principal, { cost: 1, chargeKeys: [key] });
        if (admission.refusal) throw admission.refusal;
        const reply = await this.charge(principal, key, body);
        const wire = chargeToWire(reply.charge);
        return {
          publish: 'result',
          key,
          tenant: principal.tenant,
          value: { object: 'charge_result', tenant: principal.tenant, idempotency_key: key, outcome: 'charge', charge: wire },
          outcome: { kind: 'result', status: wire.status },
        };
      } catch (error) {
        if (error instanceof ValidationError) throw new DeadLetter('invalid_request', error.message, error.errors);
        if (isRefusal(error)) {
          const problem = problemFor(error, 1).body;
          return {
            publish: 'result',
            key,
            tenant: principal.tenant,
            value: { object: 'charge_result', tenant: principal.tenant, idempotency_key: key, outcome: 'refused', problem },
            outcome: { kind: 'refused', code: error.code },
          };
        }
        throw error;
      }
    } catch (error) {
      if (!(error instanceof DeadLetter)) throw error;
      return {
        publish: 'dead_letter',
        key,
        value: {
          object: 'dead_letter',
          reason: error.reason,
          detail: error.message,
          ...(error.errors !== undefined ? { errors: error.errors } : {}),
          source: { topic: message.topic, partition: message.partition, offset: String(message.offset), key },
          value_base64: (message.value ?? Buffer.alloc(0)).toString('base64'),
        },
        outcome: { kind: 'dead_letter', reason: error.reason },
      };
    }
  }

  /** The same call as POST /v1/charges, repeated (it attaches) while the charge is undecided, within outcomeWaitMs. */
  private async charge(principal: Principal, key: string, body: unknown): Promise<ChargeReply> {
    const { charges, config } = this.options.context;
    const actor = chargeActorOf(principal);
    const deadline = Date.now() + this.options.settings.outcomeWaitMs;
    for (;;) {
      const waitMs = Math.max(1, Math.min(config.CHARGE_WAIT_BUDGET_MS, deadline - Date.now()));
      const reply = await charges.charge(principal.tenant, key, body, { waitMs, ...(actor ? { actor } : {}) });
      if (reply.completed || Date.now() >= deadline || this.stopping.signal.aborted) return reply;
    }
  }

  private async publish(message: Message<Buffer, Buffer, Buffer, Buffer>, decision: Decision): Promise<void> {
    const { settings } = this.options;
    const headers = new Map<Buffer, Buffer>([[Buffer.from('cg-outcome'), Buffer.from(decision.outcome.kind)]]);
    if (decision.publish === 'result') headers.set(Buffer.from('cg-tenant'), Buffer.from(decision.tenant));
    const record = {
      topic: decision.publish === 'result' ? settings.resultTopic : settings.deadLetterTopic,
      key: Buffer.from(decision.key === '' ? `${message.topic}/${message.partition}@${message.offset}` : decision.key),
      value: Buffer.from(JSON.stringify(decision.value)),
      headers,
    };
    // One send at a time: the client's idempotent producer numbers each partition's batches, and
    // two sends in flight at once reached the broker out of order ("out of order sequence number"),
    // after which every send of that producer failed. A failed send replaces the producer (a new
    // producer id starts its numbering afresh); the message is then tried again.
    const send = this.sending.then(async () => {
      try {
        await this.producer!.send({ messages: [record] });
      } catch (error) {
        const broken = this.producer!;
        this.producer = this.newProducer();
        await broken.close().catch((closeError: unknown) => this.log(`intake: closing a failed producer failed: ${(closeError as Error).message}`));
        throw error;
      }
    });
    this.sending = send.catch(() => undefined);
    await send;
  }
}

/** The longest a rate-limited message waits before it is tried again, in ms (the limiter's Retry-After, capped). */
const rateLimitWaitMaxMs = 60_000;

/** How long closing a client may take, in ms: against a broker that is away, a close can wait for ever. */
const closeWaitMs = 5_000;

async function settleWithin(promise: Promise<unknown>, waitMs: number, log: (line: string) => void, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), waitMs);
  });
  try {
    const outcome = await Promise.race([promise.then(() => 'done' as const), timeout]);
    if (outcome === 'timeout') log(`intake: ${what} took over ${waitMs} ms; going on without it`);
  } catch (error) {
    log(`intake: ${what} failed: ${describeError(error)}`);
  } finally {
    clearTimeout(timer);
  }
}

function headerMap(headers: Map<Buffer, Buffer> | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const [name, value] of headers ?? []) out.set(name.toString('utf8').toLowerCase(), value.toString('utf8'));
  return out;
}

/** Creates the request, result and dead-letter topics when missing; leaves existing ones as they are. */
export async function ensureIntakeTopics(settings: IntakeSettings): Promise<void> {
  const admin = new Admin({ clientId: 'chargeguard-intake-admin', bootstrapBrokers: settings.brokers, retries: 10 });
  try {
    const existing = new Set(await admin.listTopics());
    const missing = [settings.requestTopic, settings.resultTopic, settings.deadLetterTopic].filter((t) => !existing.has(t));
    if (missing.length > 0) {
      await admin.createTopics({ topics: missing, partitions: settings.topicPartitions, replicas: -1 }).catch((error: unknown) => {
        // Another consumer created it between the list and the create.
        if (!/already exists/i.test(String((error as Error).message) + JSON.stringify((error as { errors?: unknown }).errors ?? ''))) throw error;
      });
    }
  } finally {
    await admin.close();
  }
}

/** The client's errors carry their causes in `errors` (one per broker request): the first few, for the log. */
function describeError(error: unknown): string {
  const e = error as { message?: string; errors?: unknown[]; code?: string };
  const causes = Array.isArray(e.errors) ? e.errors.slice(0, 3).map((cause) => describeError(cause)) : [];
  return `${e.code ? `${e.code}: ` : ''}${e.message ?? String(error)}${causes.length ? ` [${causes.join('; ')}]` : ''}`;
}
