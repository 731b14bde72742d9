import { Webhook } from 'standardwebhooks';

/**
 * A receiver's side of webhook endpoints (docs/webhook-endpoints.md): verify a delivery with the
 * endpoint's secret and get its event, with the Standard Webhooks specification's official library
 * (signature over `webhook-id.webhook-timestamp.body`, any of the `v1,` signatures, timestamp within
 * 5 minutes). Pass the body exactly as received, before any JSON parsing.
 */
export interface DeliveredEvent {
  id: string;
  object: 'event';
  type: string;
  created_at: string;
  /** 1, 2, 3 … per object: drop an event older than one you have for the same object. */
  sequence: number;
  data: { object: Record<string, unknown> };
}

export class WebhookDeliveryRejected extends Error {}

/** The event of a verified delivery; throws WebhookDeliveryRejected when it does not verify. */
export function verifyWebhookDelivery(secret: string, rawBody: string | Buffer, headers: Record<string, string | string[] | undefined>): DeliveredEvent {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) flat[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : value;
  try {
    return new Webhook(secret).verify(rawBody, flat) as DeliveredEvent;
  } catch (error) {
    throw new WebhookDeliveryRejected(`the delivery does not verify: ${(error as Error).message}`);
  }
}
