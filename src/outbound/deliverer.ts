import { createHmac, randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { LedgerPool } from '../ledger/pool.js';
import { claimDeliveries, recordAttempt, signingSecretPrefix, type ClaimedDelivery, type EventRow, type WebhookEndpoint } from '../ledger/webhook-endpoints.js';
import { DeliveredRecorder } from './delivered-recorder.js';
import { postThroughDoor, type DoorResponse, type DoorSettings } from './door.js';
import { DoorConnections } from './door-connections.js';

/**
 * The deliverer (docs/webhook-endpoints.md): sends the webhook deliveries the events table's
 * trigger makes, at least once, signed per the Standard Webhooks specification.
 *
 * The engine is the ledger itself, not Temporal: a delivery is a row, claimed with FOR UPDATE SKIP
 * LOCKED under a lease. A charge pays for its deliveries only the trigger's rows, written in its
 * own transaction (an index lookup of the tenant's endpoints and one insert per subscribed
 * endpoint); a workflow per delivery would add a workflow start and at least three history events
 * per delivery to the same Temporal server the charges run on. A process killed mid-attempt (SIGKILL)
 * leaves a lease that expires, and any process claims the row again: no state lives in memory.
 *
 * Concurrency is bounded twice: `concurrency` attempts in flight in this process, and
 * `perEndpointConcurrency` in flight to one endpoint across every process (the claim counts live
 * leases), so a slow or dead endpoint holds at most that many slots and never the others'. The
 * HTTP work runs on this process's event loop, on kept-alive connections of its own
 * (door-connections.ts), apart from the charges' activities. What a delivery costs is mostly fixed
 * per statement, so statements are shared: a finished attempt's claim waits claimCoalesceMs after
 * the last one so that it refills several slots, and the successes answered since the last claim are
 * recorded by the next one, in its transaction.
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
  /** Called after each attempt is recorded (metrics, tests). */
  onAttempt?: (delivery: ClaimedDelivery, response: DoorResponse, disabled: string | null) => void;
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

export class WebhookDeliverer {
  private readonly owner: string;
  private readonly delivered: DeliveredRecorder;
  private readonly inFlight = new Set<Promise<void>>();
  private running = false;
  private loop: Promise<void> | null = null;
  /** Ends the loop's wait: at once, or (an attempt finished) no sooner than claimCoalesceMs after the last claim. */
  private wake: ((coalesce: boolean) => void) | null = null;
  private lastClaimAt = Number.NEGATIVE_INFINITY;
  /** The last claim took perEndpointConcurrency rows of some endpoint: it may have more due, so no coalescing. */
  private lastClaimFilledAnEndpoint = false;
  /** Requests being sent now (their answers not in yet). */
  private sending = 0;
  private readonly connections: DoorConnections;

  constructor(private readonly options: DelivererOptions) {
    const { settings } = options;
    const attemptMaxMs = settings.door.connectTimeoutMs + settings.door.responseTimeoutMs;
    if (settings.leaseMs <= attemptMaxMs) {
      throw new Error(`the delivery lease (${settings.leaseMs} ms) must outlast an attempt (connect + response timeouts: ${attemptMaxMs} ms)`);
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

  /** Stops claiming, and waits for the attempts in flight (each bounded by the door's timeouts). */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.(false);
    await this.loop;
    // Successes the loop did not take into a claim are written by the recorder itself now.
    this.delivered.nudge();
    await Promise.allSettled([...this.inFlight]);
    this.connections.close();
  }

  private async run(): Promise<void> {
    const { settings } = this.options;
    while (this.running) {
      // Successes answered since the last claim are recorded by this claim, in its transaction:
      // their slots are free for it.
      const carried = this.delivered.takeWaiting();
      const free = settings.concurrency - this.inFlight.size + carried.attempts.length;
      let claimed: ClaimedDelivery[] = [];
      // Carried successes are in inFlight, so free >= their number; the claim runs for them in any case.
      if (free > 0 || carried.attempts.length > 0) {
        this.lastClaimAt = performance.now();
        try {
          claimed = await claimDeliveries(
            this.options.pool,
            {
              owner: this.owner,
              leaseMs: settings.leaseMs,
              perEndpointMax: settings.perEndpointConcurrency,
              max: Math.max(free, 0),
              ...(this.options.onlyTenants ? { onlyTenants: this.options.onlyTenants } : {}),
            },
            carried.attempts,
          );
          carried.settle();
        } catch (error) {
          carried.settle(error);
          this.log(`claiming webhook deliveries failed (${(error as Error).message}); trying again in ${settings.pollIntervalMs} ms`);
        }
        // The carried attempts end (and leave inFlight) before the next claim counts its free slots.
        if (carried.attempts.length > 0) await new Promise<void>((resolve) => setImmediate(resolve));
      }
      const perEndpoint = new Map<string, number>();
      for (const delivery of claimed) perEndpoint.set(delivery.endpointId, (perEndpoint.get(delivery.endpointId) ?? 0) + 1);
      this.lastClaimFilledAnEndpoint = [...perEndpoint.values()].some((n) => n >= settings.perEndpointConcurrency);
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
      // A full claim may leave more due rows: look again at once. Otherwise wait for the poll
      // interval, or for a slot to free up when every slot is taken.
      if (claimed.length > 0 && claimed.length === free) continue;
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
        // Successes answered while the claim was out wait for the next one: as if they woke it now.
        if (this.delivered.waiting() > 0) this.wake(true);
      });
    }
  }

  private async attempt(delivery: ClaimedDelivery): Promise<void> {
    const { settings } = this.options;
    const startedAt = new Date();
    const body = JSON.stringify(this.options.render(delivery.event));
    const headers = signedHeaders(delivery.event.id, delivery.secrets, body, startedAt);
    this.sending += 1;
    let response: DoorResponse;
    try {
      response = await postThroughDoor(delivery.url, headers, body, settings.door, this.connections);
    } finally {
      this.sending -= 1;
    }
    const delivered = response.statusCode !== null && response.statusCode >= 200 && response.statusCode < 300;
    const gone = response.statusCode === 410;
    const error = response.error ?? (delivered ? null : response.statusCode !== null && response.statusCode >= 300 && response.statusCode < 400 ? `redirect (${response.statusCode}) not followed` : null);
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
      this.options.onAttempt?.(delivery, response, null);
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
    this.options.onAttempt?.(delivery, response, disabled);
  }

  private log(line: string): void {
    (this.options.log ?? ((text: string) => process.stderr.write(`${text}\n`)))(line);
  }
}
