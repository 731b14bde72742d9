import { createHmac, randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { LedgerPool } from '../ledger/pool.js';
import {
  recordAttempt,
  recordCursorBatches,
  signingSecretPrefix,
  takeWork,
  type BatchAttempt,
  type ClaimedDelivery,
  type CursorBatch,
  type EventRow,
  type FinishedBatch,
  type WebhookEndpoint,
} from '../ledger/webhook-endpoints.js';
import { DeliveredRecorder } from './delivered-recorder.js';
import { postThroughDoor, type DoorResponse, type DoorSettings } from './door.js';
import { DoorConnections } from './door-connections.js';

/**
 * The deliverer (docs/webhook-endpoints.md): sends every event to the endpoints that subscribe to
 * it, at least once, signed per the Standard Webhooks specification.
 *
 * The engine is the ledger itself, not Temporal, and a charge pays nothing for its deliveries beyond
 * its event's row: first attempts are read from the events log by a cursor per endpoint, a batch at
 * a time. A cursor orders its tenant's events by (writing transaction, seq) and reads only those
 * whose transaction is below the oldest one still running, so no event can appear behind it later
 * (a cursor over seq alone could skip a transaction that commits late). Two lanes, one round trip:
 * each take (webhook_deliveries_take) records what this process finished since the last one, claims
 * due delivery rows (the retry lane: retries of failed first attempts, redeliveries asked for), and
 * leases endpoints' cursors with up to cursorBatchEventsMax events each. A batch is sent in cursor
 * order, its share of the endpoint's slots at a time; once all its attempts are over, the next take
 * writes its delivered rows and their attempts and moves the cursor past them, in one statement,
 * only if this process still holds the cursor where the batch began. A batch with a failure is
 * recorded at once in a transaction of its own: each failure becomes a delivery row of the retry
 * lane, and its endpoint's run of failures (and 410, disabling) goes on by the retry lane's rule.
 *
 * A process killed mid-batch (SIGKILL) or cut off from the database leaves the cursor where it was
 * and a lease that expires; the batch is sent again by whoever takes the cursor next (the same
 * webhook-id, the event's id): duplicates are allowed, a gap never. No state lives in memory.
 *
 * Concurrency is bounded twice: `concurrency` attempts in flight in this process (a batch holds its
 * slots until recorded), and `perEndpointConcurrency` in flight to one endpoint across every
 * process: retry leases and the cursor's slots (recorded on the endpoint row while its lease is
 * live) count against each other, under the claims' lock. A slow or dead endpoint therefore holds
 * at most that many slots and never the others'. The HTTP work runs on this process's event loop,
 * on kept-alive connections of its own (door-connections.ts), apart from the charges' activities.
 * What a delivery costs is mostly fixed per statement, so statements are shared: a take waits
 * claimCoalesceMs after the last one so that it refills several slots and records several outcomes.
 */
export interface RetrySchedule {
  /** The first retry's delay bound, milliseconds; each next one doubles it, up to maxDelayMs. */
  firstDelayMs: number;
  /** The largest delay bound between two attempts, milliseconds. */
  maxDelayMs: number;
  /** A delivery not delivered this long after it was made fails for good, milliseconds (3 days by default). */
  windowMs: number;
}

export interface DelivererSettings {
  retry: RetrySchedule;
  /** An endpoint whose attempts have all failed for this long is disabled (and says so in an event), milliseconds. */
  disableAfterFailingMs: number;
  /** How long a claim holds, milliseconds: longer than one attempt can last (connect + response timeouts). */
  leaseMs: number;
  /** Attempts in flight in this process. */
  concurrency: number;
  /** Attempts in flight to one endpoint, across every process. */
  perEndpointConcurrency: number;
  /** How often the deliverer looks for due deliveries while it has free slots, milliseconds. */
  pollIntervalMs: number;
  /**
   * After an attempt finishes, the next claim waits until this long after the previous one,
   * milliseconds: attempts finishing close together free their slots for one claim of several rows
   * instead of a claim each, and a steady trickle of events is claimed a few at a time. Not when the
   * previous claim filled some endpoint's every slot (a backlog): then the freed slots are refilled
   * at once, so this never bounds an endpoint's rate. 0 claims after every attempt.
   */
  claimCoalesceMs: number;
  door: DoorSettings;
  /** Kept-alive connections to receivers (door-connections.ts); at most perEndpointConcurrency per endpoint address. */
  keepAlive: { idleMs: number; maxOrigins: number };
}

/** The body of a delivery: the event as GET /v1/events/{id} shows it. */
export type EventRenderer = (row: EventRow) => unknown;

export interface DelivererOptions {
  /** The ledger; the deliverer holds a connection only for its short statements, never across an HTTP request. */
  pool: LedgerPool;
  settings: DelivererSettings;
  render: EventRenderer;
  /** The endpoint as the API shows it, for the `webhook_endpoint.disabled` event. */
  renderEndpoint: (endpoint: WebhookEndpoint) => unknown;
  /** Deliver only these tenants' events (a deliverer dedicated to some tenants; tests); every tenant's by default. */
  onlyTenants?: readonly string[];
  /** Names this process's leases; unique by default. */
  owner?: string;
  log?: (line: string) => void;
  /**
   * Called after each attempt (metrics, tests): a retry's once recorded, with whether it disabled
   * the endpoint; a cursor batch's first attempt once answered (deliveryId null; its record, and any
   * disabling, come with its batch's).
   */
  onAttempt?: (attempt: { deliveryId: number | null; endpointId: string; eventId: string; attempt: number }, response: DoorResponse, disabled: string | null) => void;
}

/** The delay before the attempt after `attempt` failed ones: exponential, with full jitter (uniform in [0, bound]). */
export function retryDelayMs(schedule: RetrySchedule, attempt: number, random: () => number = Math.random): number {
  const bound = Math.min(schedule.maxDelayMs, schedule.firstDelayMs * 2 ** Math.min(attempt - 1, 40));
  return Math.floor(random() * bound);
}

/**
 * When to try again after a failed attempt, or null when the delivery's window is over. The last
 * try falls at the window's end at the latest, so a receiver back just before it still gets it.
 */
export function nextAttemptAt(schedule: RetrySchedule, attempt: number, createdAt: Date, now: Date, random: () => number = Math.random): Date | null {
  const windowEnd = createdAt.getTime() + schedule.windowMs;
  if (now.getTime() >= windowEnd) return null;
  return new Date(Math.min(now.getTime() + retryDelayMs(schedule, attempt, random), windowEnd));
}

/** The Standard Webhooks headers of one delivery: one `v1,` signature per live secret, space-separated. */
export function signedHeaders(eventId: string, secrets: readonly string[], body: string, at: Date): Record<string, string> {
  if (secrets.length === 0) throw new Error('an endpoint without a live signing secret cannot be delivered to');
  const timestamp = String(Math.floor(at.getTime() / 1000));
  const signed = `${eventId}.${timestamp}.${body}`;
  const signatures = secrets.map((secret) => `v1,${createHmac('sha256', signingKey(secret)).update(signed).digest('base64')}`);
  return {
    'content-type': 'application/json',
    'user-agent': 'chargeguard-webhooks/1',
    'webhook-id': eventId,
    'webhook-timestamp': timestamp,
    'webhook-signature': signatures.join(' '),
  };
}

/**
 * Signing keys by secret (`whsec_` + base64 of the key): decoding one is what every delivery to an
 * endpoint would repeat. The HMAC itself is node:crypto's (native), not the standardwebhooks
 * package's pure-JavaScript SHA-256, which cost several times more per delivery; the signature is
 * the same bytes (a test signs with both).
 */
const signingKeys = new Map<string, Buffer>();
/** Keys kept at most (live secrets of the endpoints delivered to lately); past it the cache starts over. */
const signingKeysMax = 1_024;

function signingKey(secret: string): Buffer {
  let key = signingKeys.get(secret);
  if (key === undefined) {
    key = Buffer.from(secret.startsWith(signingSecretPrefix) ? secret.slice(signingSecretPrefix.length) : secret, 'base64');
    if (key.length === 0) throw new Error('an empty signing secret cannot sign');
    if (signingKeys.size >= signingKeysMax) signingKeys.clear();
    signingKeys.set(secret, key);
  }
  return key;
}

/**
 * Events one cursor batch reads at most, of its endpoint's tenant (those the endpoint subscribes to
 * are sent; the cursor passes the others). Bounds the rows a take returns per endpoint and the
 * events a lost lease sends again; a backlog drains a batch per take, each refilled as soon as the
 * one before is recorded.
 */
export const cursorBatchEventsMax = 64;

/** A cursor batch this process holds: its slots count against `concurrency` until it is recorded or dropped. */
interface HeldBatch {
  slots: number;
}

export class WebhookDeliverer {
  private readonly owner: string;
  private readonly delivered: DeliveredRecorder;
  /** Attempts of the retry lane in flight, one slot each. */
  private readonly inFlight = new Set<Promise<void>>();
  /** Cursor batches being sent, or finished and waiting for the take that records them. */
  private readonly batchesHeld = new Set<HeldBatch>();
  private readonly batchRuns = new Set<Promise<void>>();
  /** Cursor batches whose attempts all succeeded, for the next take to record. */
  private finishedBatches: Array<{ held: HeldBatch; finished: FinishedBatch }> = [];
  private running = false;
  private loop: Promise<void> | null = null;
  /** Ends the loop's wait: at once, or (an attempt finished) no sooner than claimCoalesceMs after the last claim. */
  private wake: ((coalesce: boolean) => void) | null = null;
  private lastClaimAt = Number.NEGATIVE_INFINITY;
  /** The last take filled some endpoint's slots or a whole cursor batch: it may have more due, so no coalescing. */
  private lastClaimFilledAnEndpoint = false;
  /** Requests being sent now (their answers not in yet). */
  private sending = 0;
  private readonly connections: DoorConnections;
  /** The longest one attempt can last (connect + response timeouts), milliseconds. */
  private readonly attemptMaxMs: number;

  constructor(private readonly options: DelivererOptions) {
    const { settings } = options;
    this.attemptMaxMs = settings.door.connectTimeoutMs + settings.door.responseTimeoutMs;
    if (settings.leaseMs <= this.attemptMaxMs) {
      throw new Error(`the delivery lease (${settings.leaseMs} ms) must outlast an attempt (connect + response timeouts: ${this.attemptMaxMs} ms)`);
    }
    this.owner = options.owner ?? `${hostname()}/${process.pid}/${randomBytes(4).toString('hex')}`;
    // Successes wait for the other answers of their claim at most as long as the next claim does.
    // While the loop runs, its next claim records them (within claimCoalesceMs of the last claim).
    this.delivered = new DeliveredRecorder(options.pool, () => this.sending, settings.claimCoalesceMs, () => this.running);
    this.connections = new DoorConnections({ ...settings.keepAlive, maxSocketsPerOrigin: settings.perEndpointConcurrency });
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.run();
  }

  /** Stops taking work, and waits for the attempts in flight (each bounded by the door's timeouts); batches cut short are recorded as far as they got. */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.(false);
    await this.loop;
    // Successes the loop did not take into a claim are written by the recorder itself now.
    this.delivered.nudge();
    await Promise.allSettled([...this.inFlight, ...this.batchRuns]);
    const left = this.finishedBatches.splice(0);
    if (left.length > 0) {
      await this.recordBatches(left.map((item) => item.finished)).catch((error: unknown) => {
        this.log(`recording ${left.length} webhook cursor batch(es) at stop failed (${(error as Error).message}); their leases expire and they are sent again`);
      });
    }
    this.connections.close();
  }

  /** Slots held: retry attempts in flight and cursor batches not yet recorded. */
  private slotsInUse(): number {
    let slots = this.inFlight.size;
    for (const held of this.batchesHeld) slots += held.slots;
    return slots;
  }

  private async run(): Promise<void> {
    const { settings } = this.options;
    while (this.running) {
      // Successes answered since the last take, and cursor batches that all succeeded, are recorded
      // by this take, in its transaction: their slots are free for it.
      const carried = this.delivered.takeWaiting();
      const carriedBatches = this.finishedBatches.splice(0);
      const carriedSlots = carriedBatches.reduce((sum, item) => sum + item.held.slots, 0);
      const free = settings.concurrency - this.slotsInUse() + carried.attempts.length + carriedSlots;
      let claimed: ClaimedDelivery[] = [];
      let batches: CursorBatch[] = [];
      let takenSlots = 0;
      // Carried outcomes hold slots, so free >= their number; the take runs for them in any case.
      if (free > 0 || carried.attempts.length > 0 || carriedBatches.length > 0) {
        this.lastClaimAt = performance.now();
        try {
          ({ retry: claimed, batches } = await takeWork(
            this.options.pool,
            {
              owner: this.owner,
              leaseMs: settings.leaseMs,
              perEndpointMax: settings.perEndpointConcurrency,
              max: Math.max(free, 0),
              batchEventsMax: cursorBatchEventsMax,
              ...(this.options.onlyTenants ? { onlyTenants: this.options.onlyTenants } : {}),
            },
            { delivered: carried.attempts, batches: carriedBatches.map((item) => item.finished) },
          ));
          carried.settle();
        } catch (error) {
          carried.settle(error);
          this.log(`claiming webhook deliveries failed (${(error as Error).message}); trying again in ${settings.pollIntervalMs} ms`);
          for (const item of carriedBatches) {
            this.log(`webhook cursor batch to endpoint ${item.finished.endpointId}: recording it failed; its lease expires and its ${item.finished.attempts.length} events are sent again`);
          }
        }
        for (const item of carriedBatches) this.batchesHeld.delete(item.held);
        // The carried attempts end (and leave inFlight) before the next claim counts its free slots.
        if (carried.attempts.length > 0) await new Promise<void>((resolve) => setImmediate(resolve));
      }
      const perEndpoint = new Map<string, number>();
      for (const delivery of claimed) perEndpoint.set(delivery.endpointId, (perEndpoint.get(delivery.endpointId) ?? 0) + 1);
      this.lastClaimFilledAnEndpoint =
        [...perEndpoint.values()].some((n) => n >= settings.perEndpointConcurrency) || batches.some((batch) => batch.events.length >= cursorBatchEventsMax);
      for (const delivery of claimed) {
        const attempt = this.attempt(delivery).catch((error: unknown) => {
          // The lease expires and another claim retries it.
          this.log(`webhook delivery ${delivery.id} to endpoint ${delivery.endpointId}: recording the attempt failed (${(error as Error).message})`);
        });
        const tracked = attempt.finally(() => {
          this.inFlight.delete(tracked);
          this.wake?.(true);
        });
        this.inFlight.add(tracked);
      }
      takenSlots += claimed.length;
      for (const batch of batches) {
        takenSlots += batch.slots;
        this.startBatch(batch, this.lastClaimAt);
      }
      // A full take may leave more due work: look again at once. Otherwise wait for the poll
      // interval, or for a slot to free up when every slot is taken.
      if (takenSlots > 0 && takenSlots >= free) continue;
      await new Promise<void>((resolve) => {
        let dueAt = performance.now() + settings.pollIntervalMs;
        let timer = setTimeout(done, settings.pollIntervalMs);
        const self = this;
        function done() {
          clearTimeout(timer);
          self.wake = null;
          resolve();
        }
        this.wake = (coalesce) => {
          const at = coalesce && !this.lastClaimFilledAnEndpoint ? this.lastClaimAt + settings.claimCoalesceMs : 0;
          const now = performance.now();
          if (at <= now) return done();
          if (at >= dueAt) return;
          dueAt = at;
          clearTimeout(timer);
          timer = setTimeout(done, at - now);
        };
        // Successes answered while the take was out wait for the next one: as if they woke it now.
        // (A finished batch waits for the poll, as when it finishes during the wait.)
        if (this.delivered.waiting() > 0) this.wake(true);
      });
    }
  }

  /**
   * Sends a cursor batch's events in cursor order, `slots` at a time. No attempt begins once it
   * could end after the batch's lease (taken at `takenAt` at the latest), nor after a 410 or a stop:
   * the events attempted are then a prefix, and the cursor moves to the last of them. A batch that
   * all succeeded rides with the next take; one with a failure is recorded at once, in a
   * transaction of its own with what the failure does to its endpoint.
   */
  private startBatch(batch: CursorBatch, takenAt: number): void {
    const { settings } = this.options;
    const held: HeldBatch = { slots: batch.slots };
    this.batchesHeld.add(held);
    const lastStartAt = takenAt + settings.leaseMs - this.attemptMaxMs - settings.claimCoalesceMs;
    const run = async (): Promise<void> => {
      const attempts: BatchAttempt[] = [];
      let next = 0;
      let gone = false;
      const sender = async () => {
        while (next < batch.events.length && !gone && this.running && performance.now() <= lastStartAt) {
          const index = next;
          next += 1;
          const attempt = await this.sendFirstAttempt(batch, batch.events[index]!.event);
          attempts[index] = attempt;
          if (attempt.gone) gone = true;
        }
      };
      await Promise.all(Array.from({ length: Math.min(batch.slots, batch.events.length) }, sender));
      const finished: FinishedBatch = {
        endpointId: batch.endpointId,
        from: batch.from,
        to: next === batch.events.length ? batch.to : next === 0 ? batch.from : batch.events[next - 1]!.position,
        attempts: attempts.slice(0, next),
      };
      if (finished.attempts.every((attempt) => attempt.delivered)) {
        // The common case: the next take records it (or stop(), once the loop is over). Not a take
        // of its own: the next poll's gathers every batch finished by then (and the events written
        // meanwhile) into one statement; at once only when the cursor may have more waiting now (a
        // full batch, or one cut short) or this process has no slot left.
        this.finishedBatches.push({ held, finished });
        const moreWaiting = batch.events.length >= cursorBatchEventsMax || next < batch.events.length;
        if (moreWaiting || this.slotsInUse() >= settings.concurrency) this.wake?.(false);
        return;
      }
      this.delivered.nudge();
      try {
        await this.recordBatches([finished]);
      } catch (error) {
        this.log(`webhook cursor batch to endpoint ${batch.endpointId}: recording it failed (${(error as Error).message}); its lease expires and its events are sent again`);
      } finally {
        this.batchesHeld.delete(held);
        this.wake?.(true);
      }
    };
    const tracked = run()
      .catch((error: unknown) => {
        this.batchesHeld.delete(held);
        this.log(`webhook cursor batch to endpoint ${batch.endpointId} failed (${(error as Error).message}); its lease expires and its events are sent again`);
      })
      .finally(() => {
        this.batchRuns.delete(tracked);
      });
    this.batchRuns.add(tracked);
  }

  private async recordBatches(batches: FinishedBatch[]): Promise<void> {
    const { disabled } = await recordCursorBatches(this.options.pool, this.owner, batches, {
      disableAfterFailingMs: this.options.settings.disableAfterFailingMs,
      renderEndpoint: this.options.renderEndpoint,
    });
    for (const { endpointId, reason } of disabled) this.log(`webhook endpoint ${endpointId} disabled (${reason === 'gone' ? 'it answered 410 Gone' : 'failing too long'})`);
  }

  /** One event of a cursor batch, its first attempt: sent, and judged as the retry lane judges one. */
  private async sendFirstAttempt(batch: CursorBatch, event: EventRow): Promise<BatchAttempt> {
    const startedAt = new Date();
    const response = await this.send(batch.url, batch.secrets, event, startedAt);
    const verdict = judge(response);
    const retryAt = verdict.delivered || verdict.gone ? null : nextAttemptAt(this.options.settings.retry, 1, batch.takenAt, new Date());
    this.options.onAttempt?.({ deliveryId: null, endpointId: batch.endpointId, eventId: event.id, attempt: 1 }, response, null);
    return { eventId: event.id, startedAt, durationMs: response.durationMs, statusCode: response.statusCode, error: verdict.error, delivered: verdict.delivered, gone: verdict.gone, retryAt };
  }

  private async send(url: string, secrets: readonly string[], event: EventRow, startedAt: Date): Promise<DoorResponse> {
    const body = JSON.stringify(this.options.render(event));
    const headers = signedHeaders(event.id, secrets, body, startedAt);
    this.sending += 1;
    try {
      return await postThroughDoor(url, headers, body, this.options.settings.door, this.connections);
    } finally {
      this.sending -= 1;
    }
  }

  private async attempt(delivery: ClaimedDelivery): Promise<void> {
    const { settings } = this.options;
    const startedAt = new Date();
    const response = await this.send(delivery.url, delivery.secrets, delivery.event, startedAt);
    const { delivered, gone, error } = judge(response);
    const subject = { deliveryId: delivery.id, endpointId: delivery.endpointId, eventId: delivery.event.id, attempt: delivery.attempt };
    if (delivered && response.statusCode !== null) {
      // The common case, batched with the other successes finishing now: the next claim records
      // them all (or, once the deliverer stops, one statement of their own). That claim is due now.
      const recorded = this.delivered.record({
        deliveryId: delivery.id,
        endpointId: delivery.endpointId,
        eventId: delivery.event.id,
        attempt: delivery.attempt,
        startedAt,
        durationMs: response.durationMs,
        statusCode: response.statusCode,
      });
      this.wake?.(true);
      await recorded;
      this.options.onAttempt?.(subject, response, null);
      return;
    }
    // This answer may have been the last the waiting successes waited for.
    this.delivered.nudge();
    const { disabled } = await recordAttempt(
      this.options.pool,
      {
        deliveryId: delivery.id,
        endpointId: delivery.endpointId,
        eventId: delivery.event.id,
        attempt: delivery.attempt,
        owner: this.owner,
        startedAt,
        durationMs: response.durationMs,
        statusCode: response.statusCode,
        error,
        delivered: false,
        gone,
        retryAt: gone ? null : nextAttemptAt(settings.retry, delivery.attempt, delivery.createdAt, new Date()),
        disableAfterFailingMs: settings.disableAfterFailingMs,
      },
      this.options.renderEndpoint,
    );
    if (disabled !== null) this.log(`webhook endpoint ${delivery.endpointId} disabled (${disabled === 'gone' ? 'it answered 410 Gone' : 'failing too long'})`);
    this.options.onAttempt?.(subject, response, disabled);
  }

  private log(line: string): void {
    (this.options.log ?? ((text: string) => process.stderr.write(`${text}\n`)))(line);
  }
}

/** What an answer means: 2xx delivered; 410 gone (the endpoint is disabled); anything else a failure, retried. */
function judge(response: DoorResponse): { delivered: boolean; gone: boolean; error: string | null } {
  const delivered = response.statusCode !== null && response.statusCode >= 200 && response.statusCode < 300;
  const gone = response.statusCode === 410;
  const error = response.error ?? (delivered ? null : response.statusCode !== null && response.statusCode >= 300 && response.statusCode < 400 ? `redirect (${response.statusCode}) not followed` : null);
  return { delivered, gone, error };
}
