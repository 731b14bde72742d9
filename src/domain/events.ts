/**
 * Outbound events (docs/events.md): the one list of event types, in lifecycle order, with when each
 * fires. The ledger's triggers write them (charge.<status>, refund.<status>, deposit.credited); the
 * wire schema, the list filter and the docs derive from this list.
 */
export const eventTypes = [
  /** A charge's hold was placed: status became `reserved` (again after the payer acted, for 3-D Secure). */
  'charge.reserved',
  /** A provider charge waits for its payer (3-D Secure): status became `requires_action`. */
  'charge.requires_action',
  /** The money moved: status became `succeeded` (captured). */
  'charge.succeeded',
  /** Try refused it: status became `declined`. */
  'charge.declined',
  /** Status became `cancelled`: cancelled by a caller, compensated, or its hold expired; nothing is held. */
  'charge.cancelled',
  /** A refund moved the money back. */
  'refund.succeeded',
  /** The ledger refused a refund (a decision, final for its refund key). */
  'refund.failed',
  /** Money was deposited into an account. */
  'deposit.credited',
  /**
   * The service disabled a webhook endpoint: it answered 410 Gone, or every delivery to it failed for
   * WEBHOOK_DISABLE_AFTER_FAILING_MS (docs/webhook-endpoints.md). Not written when the tenant disables it.
   */
  'webhook_endpoint.disabled',
] as const;
export type EventType = (typeof eventTypes)[number];

/** The objects events are about: `type=<object>.*` lists every type of one. */
export const eventObjectTypes = ['charge', 'refund', 'deposit', 'webhook_endpoint'] as const;
export type EventObjectType = (typeof eventObjectTypes)[number];

/** The event types of one object (`deposit` → `deposit.credited`): each type is named `<object>.<what>`. */
export function eventTypesOf(objectType: string): EventType[] {
  return eventTypes.filter((type) => type.startsWith(`${objectType}.`));
}

/** The charge statuses that are events (charge.<status>); the ledger's trigger names the same five. */
export const chargeEventStatuses = ['reserved', 'requires_action', 'succeeded', 'declined', 'cancelled'] as const;
