/**
 * Events, signed and delivered as Stripe delivers them: a POST of the event's JSON with a
 * `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">` header, one v1 per live
 * secret (during a rotation Stripe signs with the old and the new). Delivery faults on demand: late,
 * twice, and out of order.
 */
import { createHmac } from 'node:crypto';
import { z } from 'zod';
import { stripeLikeId } from './ids.js';
import type { SimulatedEvent } from './payments.js';

/** How long one delivery may take before it counts as failed. */
export const webhookDeliveryTimeoutMs = 10_000;

export function stripeSignatureHeader(payload: string, secrets: readonly string[], timestampS: number): string {
  const signatures = secrets.map((secret) => `v1=${createHmac('sha256', secret).update(`${timestampS}.${payload}`, 'utf8').digest('hex')}`);
  return [`t=${timestampS}`, ...signatures].join(',');
}

export const webhookConfigSchema = z.object({
  /** Where events are POSTed; no delivery when absent. */
  url: z.url().optional(),
  /** Every secret signs each delivery (rotation). */
  secrets: z.array(z.string().min(1)).min(1),
  /** Each delivery waits this long first (late events). */
  deliveryDelayMs: z.number().int().nonnegative().default(0),
  /** Each event is delivered twice (at-least-once delivery). */
  duplicate: z.boolean().default(false),
  /** Events wait until `release()`, which can send them in reverse order (out-of-order delivery). */
  hold: z.boolean().default(false),
});
export type WebhookConfig = z.infer<typeof webhookConfigSchema>;
export type WebhookConfigInput = z.input<typeof webhookConfigSchema>;

export interface StoredEvent {
  id: string;
  type: string;
  payload: string;
}

export interface Delivery {
  eventId: string;
  type: string;
  /** The receiver's HTTP status, or the error that stopped the delivery. */
  status: number | string;
  /** When the delivery ended, by the simulator's clock. */
  atMs: number;
}

export class WebhookSender {
  readonly events: StoredEvent[] = [];
  readonly deliveries: Delivery[] = [];
  private config: WebhookConfig | null = null;
  private heldEvents: StoredEvent[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(
    private readonly nowMs: () => number,
    private readonly apiVersion: string,
  ) {}

  configure(input: WebhookConfigInput | null): void {
    this.config = input === null ? null : webhookConfigSchema.parse(input);
  }

  emit(event: SimulatedEvent, request: { id: string; idempotencyKey: string | null }): void {
    const id = stripeLikeId('evt');
    const payload = JSON.stringify(
      {
        id,
        object: 'event',
        api_version: this.apiVersion,
        created: Math.floor(this.nowMs() / 1000),
        data: { object: event.object },
        livemode: false,
        pending_webhooks: this.config?.url ? 1 : 0,
        request: { id: request.id, idempotency_key: request.idempotencyKey },
        type: event.type,
      },
      null,
      2,
    );
    const stored = { id, type: event.type, payload };
    this.events.push(stored);
    if (!this.config?.url) return;
    if (this.config.hold) this.heldEvents.push(stored);
    else this.schedule(stored);
  }

  /** Sends the held events, in creation order or reversed; returns how many. */
  release(order: 'created' | 'reversed' = 'created'): number {
    const events = order === 'reversed' ? [...this.heldEvents].reverse() : this.heldEvents;
    this.heldEvents = [];
    for (const event of events) this.schedule(event);
    return events.length;
  }

  /** Resolves once every scheduled delivery has been attempted. */
  async idle(): Promise<void> {
    while (this.timers.size > 0 || this.inFlight.size > 0) {
      await Promise.all([...this.inFlight]);
      if (this.timers.size > 0) await new Promise((resolve) => setImmediate(resolve));
    }
  }

  stop(): void {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.heldEvents = [];
  }

  private schedule(event: StoredEvent): void {
    const config = this.config;
    if (!config?.url) return;
    const copies = config.duplicate ? 2 : 1;
    // Copies go one after the other, so "twice" is deterministic rather than a race.
    const run = async (): Promise<void> => {
      for (let i = 0; i < copies; i++) await this.deliver(event, config);
    };
    if (config.deliveryDelayMs === 0) {
      this.track(run());
      return;
    }
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      this.track(run());
    }, config.deliveryDelayMs);
    this.timers.add(timer);
  }

  private track(delivery: Promise<void>): void {
    this.inFlight.add(delivery);
    void delivery.finally(() => this.inFlight.delete(delivery));
  }

  private async deliver(event: StoredEvent, config: WebhookConfig): Promise<void> {
    // Signed when sent, as Stripe signs each attempt: a late event carries a late timestamp.
    const signature = stripeSignatureHeader(event.payload, config.secrets, Math.floor(this.nowMs() / 1000));
    try {
      const response = await fetch(config.url!, {
        method: 'POST',
        headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-signature': signature, 'user-agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)' },
        body: event.payload,
        signal: AbortSignal.timeout(webhookDeliveryTimeoutMs),
      });
      await response.arrayBuffer();
      this.deliveries.push({ eventId: event.id, type: event.type, status: response.status, atMs: this.nowMs() });
    } catch (err) {
      this.deliveries.push({ eventId: event.id, type: event.type, status: (err as Error).message, atMs: this.nowMs() });
    }
  }
}
