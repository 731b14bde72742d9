import { z } from 'zod';
import { eventObjectTypes, eventTypes, eventTypesOf, type EventType } from '../domain/events.js';
import { eventVisibleTo, visibleEventObjectTypes, type Role } from '../domain/permissions.js';
import { fromRow as chargeFromRow, type ChargeRow } from '../ledger/charges.js';
import { listEventPage, readEvent, type EventRow } from '../ledger/events.js';
import { refundFromRow, type RefundRow } from '../ledger/refunds.js';
import { depositToWire } from './accounts-service.js';
import { wireWebhookEndpointSchema, type WireWebhookEndpoint } from './webhook-endpoints.js';
import type { ServiceContext } from './context.js';
import { NotFoundError, ValidationError } from '../domain/errors.js';
import { assertTenant } from '../domain/identifiers.js';
import { pageCursorOf, resolveCursor } from './listing.js';
import { parseEventListQuery, type ValidEventListQuery } from './validation.js';
import {
  chargeToWire,
  refundToWire,
  wireChargeSchema,
  wireDepositSchema,
  wireRefundSchema,
  type WireCharge,
  type WireDeposit,
  type WireRefund,
} from './wire.js';

/**
 * Outbound events (docs/events.md): the one place an event becomes what a caller receives. The
 * HTTP API (GET /v1/events), webhook deliveries and the event stream all render a stored event
 * with `renderEvent`, and `renderEvent` renders `data.object` with the same wire functions
 * (src/service/wire.ts) the API uses for the object itself, from the row the ledger stored at that
 * change: one rendering rule, so an event's object is exactly what GET of the object answered then.
 */

export { eventObjectTypes, eventTypes, type EventType };

/** A stored event: the events table's row (src/ledger/events.ts), as webhook delivery and the event stream read it from SQL. */
export type StoredEvent = EventRow;

export const wireEventSchema = z.object({
  id: z.string().describe('evt_…: unique; the consumer\'s deduplication key (a webhook delivery\'s webhook-id)'),
  object: z.literal('event'),
  type: z.enum(eventTypes),
  created_at: z.string().describe('RFC 3339 timestamp (UTC): when the change committed (its transaction began)'),
  sequence: z
    .number()
    .int()
    .describe("1, 2, 3 … per object (data.object.id), in the order the object's changes committed: drop an event whose sequence is below one you have"),
  data: z.object({
    object: z
      .union([wireChargeSchema, wireRefundSchema, wireDepositSchema, wireWebhookEndpointSchema])
      .describe('the object as the API showed it at that change (GET of the charge, the refund; a deposit as its POST answered; a webhook endpoint as GET /v1/webhook-endpoints/{id} showed it)'),
  }),
});
export type WireEvent = z.infer<typeof wireEventSchema>;

/**
 * A stored event as callers receive it: `{id, object: "event", type, created_at, sequence, data:
 * {object}}`. `audit`: include who created the object (`created_by_key_id`), as the API shows it
 * to admin keys only. Pure: no I/O, stable name and signature (webhook delivery and the event
 * stream call it).
 */
export function renderEvent(row: StoredEvent, options: { audit?: boolean } = {}): WireEvent {
  return {
    id: row.id,
    object: 'event',
    type: row.type as EventType,
    created_at: toDate(row.created_at).toISOString(),
    sequence: row.object_sequence,
    data: { object: renderEventObject(row.object_type, row.data.object, options) },
  };
}

function renderEventObject(objectType: string, stored: Record<string, unknown>, options: { audit?: boolean }): WireCharge | WireRefund | WireDeposit | WireWebhookEndpoint {
  switch (objectType) {
    case 'charge':
      return chargeToWire(chargeFromRow(withDates<ChargeRow>(stored, chargeDateColumns)).charge, options);
    case 'refund':
      return refundToWire(refundFromRow(withDates<RefundRow>(stored, refundDateColumns)).refund, options);
    case 'deposit': {
      const deposit = withDates<{ transfer_id: number; account_id: string; amount_minor: number; currency: string; created_at: Date }>(stored, ['created_at']);
      return depositToWire({
        transferId: deposit.transfer_id,
        accountId: deposit.account_id,
        amountMinor: deposit.amount_minor,
        currency: deposit.currency.trim(),
        createdAt: deposit.created_at.toISOString(),
        replayed: false,
      });
    }
    case 'webhook_endpoint':
      // Stored as the API shows an endpoint (src/service/webhook-endpoints.ts, webhookEndpointToWire), never with a secret.
      return stored as unknown as WireWebhookEndpoint;
    default:
      throw new Error(`event of unknown object type ${objectType}`);
  }
}

/** The row's timestamp columns: stored as JSON text by to_jsonb, read back as the driver reads them (a Date, to the millisecond). */
const chargeDateColumns = ['hold_expires_at', 'created_at', 'updated_at', 'provider_authorize_sent_at', 'provider_capture_sent_at'] as const;
const refundDateColumns = ['created_at', 'provider_refunded_at'] as const;

function withDates<T>(stored: Record<string, unknown>, columns: readonly string[]): T {
  const row: Record<string, unknown> = { ...stored };
  for (const column of columns) {
    const value = row[column];
    if (typeof value === 'string') row[column] = toDate(value);
  }
  return row as T;
}

/**
 * PostgreSQL's JSON timestamps carry microseconds; the driver (postgres-date) and Date's parser both
 * truncate them to the millisecond, so the event's times equal what the API printed for the object.
 */
function toDate(value: Date | string): Date {
  const date = value instanceof Date ? value : new Date(value);
  if (Number.isNaN(date.getTime())) throw new Error(`stored event timestamp ${String(value)} is not a time`);
  return date;
}

/**
 * Who reads events, and so which of them: a reader sees the events of the objects its role may read
 * (src/domain/permissions.ts, eventVisibleTo), and no others exist for it: GET of one is a 404, lists
 * leave them out, a filter by their type is an empty page, a cursor naming one names no event. The
 * HTTP API passes its key's role, MCP its principal's, the CLI its key's or the operator's (admin).
 */
export interface EventReader {
  role: Role;
}

/** GET /v1/events/{id}: one event of this tenant that the reader may see (404 for any other, as for every object). */
export async function getEvent(ctx: ServiceContext, tenant: string, id: string, reader: EventReader): Promise<StoredEvent> {
  assertTenant(tenant);
  if (!/^evt_[A-Za-z0-9]{16,64}$/.test(id)) throw new ValidationError([{ field: 'id', message: 'must be an event id: evt_ and 16 to 64 letters or digits' }]);
  const row = await readEvent(ctx.ledger, tenant, id);
  if (!row || !eventVisibleTo(reader.role, row.object_type)) throw new NotFoundError(`no event ${id}`);
  return row;
}

/** GET /v1/events: newest first, filtered by type and object id, paged by event id; only what the reader may see. */
export async function listEventsFromQuery(
  ctx: ServiceContext,
  tenant: string,
  raw: Record<string, unknown>,
  reader: EventReader,
): Promise<{ events: StoredEvent[]; hasMore: boolean }> {
  assertTenant(tenant);
  return listEvents(ctx, tenant, parseEventListQuery(raw), reader);
}

export async function listEvents(
  ctx: ServiceContext,
  tenant: string,
  query: ValidEventListQuery,
  reader: EventReader,
): Promise<{ events: StoredEvent[]; hasMore: boolean }> {
  const cursor = pageCursorOf(query);
  const page = cursor
    ? {
        direction: cursor.direction,
        eventId: await resolveCursor(cursor, 'event', async (value) => {
          const row = await readEvent(ctx.ledger, tenant, value);
          return row && eventVisibleTo(reader.role, row.object_type) ? row.id : null;
        }),
      }
    : null;
  const visible = visibleEventObjectTypes(reader.role);
  const type = query.type === undefined ? null : query.type.endsWith('.*') ? { object: query.type.slice(0, -2), types: eventTypesOf(query.type.slice(0, -2)) } : query.type;
  return listEventPage(ctx.ledger, tenant, {
    type,
    objectId: query.objectId ?? null,
    // Every object type visible (an admin): no condition, the query as it was before roles mattered.
    objectTypes: visible.length === eventObjectTypes.length ? null : visible,
    limit: query.limit,
    cursor: page,
  });
}
