import { sha256Hex } from './request-fingerprint.js';

/**
 * Bounds of webhook endpoints (OUTBOUND deliveries of events; docs/webhook-endpoints.md and
 * docs/limits.md), each named with its unit. Pure constants.
 */
export const webhookEndpointLimits = {
  /** Endpoints one tenant may have (enabled or disabled). */
  endpointsPerTenantMax: 16,
  /** Event types one endpoint may subscribe to (`*` counts as one). */
  enabledEventsMax: 32,
  /** Characters of an endpoint's URL. */
  urlMaxLength: 2048,
  /** Characters of an endpoint's description. */
  descriptionMaxLength: 500,
  /** The longest a rotation may keep the previous secrets signing, seconds (7 days). */
  rotationOverlapMaxSeconds: 7 * 24 * 60 * 60,
  /** How long the previous secrets keep signing after a rotation that names no overlap, seconds (24 hours). */
  rotationOverlapDefaultSeconds: 24 * 60 * 60,
  /** Secrets signing at once: a delivery carries at most this many signatures. */
  liveSecretsMax: 3,
  /** Attempts GET /v1/webhook-endpoints/{id}/deliveries answers at most. */
  attemptsListMax: 100,
} as const;

/** An event type (`charge.succeeded`), as the events table accepts it, or `*` for every type. */
export const eventTypePattern = /^(\*|[a-z][a-z_]{0,31}(\.[a-z][a-z_]{0,31}){1,3})$/;

/** A webhook endpoint's id. */
export const webhookEndpointIdPattern = /^we_[A-Za-z0-9]{24}$/;

/** An event's id. */
export const eventIdPattern = /^evt_[A-Za-z0-9]{16,64}$/;

/**
 * The id of the endpoint registered under (tenant, Idempotency-Key), as an account's id is derived
 * from its key (src/service/accounts-service.ts) and a charge's (chargeIdFor): a retried create
 * names the same endpoint. `we_` and 24 hex digits (96 bits), within webhookEndpointIdPattern.
 */
export function webhookEndpointIdFor(tenant: string, idempotencyKey: string): string {
  return `we_${sha256Hex(`${tenant}\n${idempotencyKey}`).slice(0, 24)}`;
}
