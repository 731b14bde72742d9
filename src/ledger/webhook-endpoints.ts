import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { LedgerPool } from './pool.js';
import { keysetPage } from './pages.js';
import type { EventRow } from './events.js';

/**
 * Webhook endpoints and their deliveries (docs/webhook-endpoints.md): OUTBOUND events to URLs a
 * tenant registers. (The INBOUND provider callbacks that credit money are webhooks.ts.)
 */

export type EndpointDisabledReason = 'requested' | 'gone' | 'failing';

export interface WebhookEndpoint {
  id: string;
  tenant: string;
  url: string;
  enabledEvents: string[];
  description: string | null;
  disabledAt: Date | null;
  disabledReason: EndpointDisabledReason | null;
  failingSince: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

interface EndpointRow {
  id: string;
  tenant: string;
  url: string;
  enabled_events: string[];
  description: string | null;
  disabled_at: Date | null;
  disabled_reason: EndpointDisabledReason | null;
  failing_since: Date | null;
  created_at: Date;
  updated_at: Date;
}

const endpointColumns = 'id, tenant, url, enabled_events, description, disabled_at, disabled_reason, failing_since, created_at, updated_at';

function endpointFromRow(row: EndpointRow): WebhookEndpoint {
  return {
    id: row.id,
    tenant: row.tenant,
    url: row.url,
    enabledEvents: row.enabled_events,
    description: row.description,
    disabledAt: row.disabled_at,
    disabledReason: row.disabled_reason,
    failingSince: row.failing_since,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

/**
 * The events an endpoint's cursor starts after, from now on: every event inserted from now on has a
 * larger seq (its seq is taken when it is inserted, one value at a time; migration 370), and every
 * transaction that can still write one has an id at or above the oldest running one (the default of
 * cursor_xact). An endpoint created or enabled again gets the events written after that moment.
 */
const cursorFromSeqNow = '(SELECT coalesce(max(seq), 0) FROM events)';

/** `we_` and 24 letters and digits (~143 random bits). */
export function newEndpointId(): string {
  return `we_${alphanumeric(24)}`;
}

/** `evt_` and 32 hex digits, as the outbox's own writers make them. */
export function newEventId(): string {
  return `evt_${randomBytes(16).toString('hex')}`;
}

/** What a signing secret starts with, before the base64 of its key (the Standard Webhooks form). */
export const signingSecretPrefix = 'whsec_';

/** A signing secret in the Standard Webhooks form: `whsec_` and the base64 of 32 random bytes. */
export function newSigningSecret(): string {
  return `${signingSecretPrefix}${randomBytes(32).toString('base64')}`;
}

const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

function alphanumeric(length: number): string {
  // 248 = 4 x 62: bytes at or above it are dropped, so every character is equally likely.
  let out = '';
  while (out.length < length) {
    for (const byte of randomBytes(length * 2)) {
      if (byte < 248 && out.length < length) out += alphabet[byte % 62];
    }
  }
  return out;
}

async function inTransaction<T>(pool: LedgerPool, work: (client: pg.PoolClient) => Promise<T>, options: { asyncCommit?: boolean } = {}): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    if (options.asyncCommit) await client.query('SET LOCAL synchronous_commit = off');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

/**
 * The deliverer's own transactions (a claim, an attempt's record) commit without waiting for the
 * WAL flush: a crash of the database that loses one loses only a lease (the row is claimed again)
 * or an attempt's record with its state change (the delivery is sent again, which at least once
 * allows, and an endpoint's disabling with its event, together). Deliveries themselves are made in
 * the event's transaction, which commits as the charge's does. Two flushes fewer per delivery.
 * The claim and a success are single calls of ledger functions that set this for their own
 * transaction; this is the failed attempt's transaction.
 */
function inDelivererTransaction<T>(pool: LedgerPool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  return inTransaction(pool, work, { asyncCommit: true });
}

/** A tenant's endpoints are counted and changed under this lock, so two creates cannot both pass the limit. */
async function lockTenantEndpoints(client: pg.PoolClient, tenant: string): Promise<void> {
  await client.query("SELECT pg_advisory_xact_lock(hashtextextended('webhook_endpoints:' || $1, 0))", [tenant]);
}

export class EndpointLimitError extends Error {
  constructor(readonly max: number) {
    super(`this tenant has ${max} webhook endpoints, the most allowed: delete one first`);
  }
}

export interface NewEndpoint {
  tenant: string;
  url: string;
  enabledEvents: string[];
  description: string | null;
}

/** Creates the endpoint and its first signing secret; the secret is returned this once. */
export async function createEndpoint(pool: LedgerPool, input: NewEndpoint, endpointsPerTenantMax: number): Promise<{ endpoint: WebhookEndpoint; secret: string }> {
  return inTransaction(pool, async (client) => {
    await lockTenantEndpoints(client, input.tenant);
    const { endpoint, secret } = await insertEndpoint(client, input, newEndpointId(), endpointsPerTenantMax);
    return { endpoint, secret: secret.value };
  });
}

/** Under the tenant's endpoint lock: the limit, then the endpoint and its first secret. */
async function insertEndpoint(
  client: pg.PoolClient,
  input: NewEndpoint,
  id: string,
  endpointsPerTenantMax: number,
): Promise<{ endpoint: WebhookEndpoint; secret: { id: string; value: string } }> {
  const count = await client.query<{ n: number }>('SELECT count(*)::int AS n FROM webhook_endpoints WHERE tenant = $1', [input.tenant]);
  if (count.rows[0]!.n >= endpointsPerTenantMax) throw new EndpointLimitError(endpointsPerTenantMax);
  const inserted = await client.query<EndpointRow>(
    // Its cursor starts at the current position (docs/webhook-endpoints.md, How a delivery is made).
    `INSERT INTO webhook_endpoints (id, tenant, url, enabled_events, description, cursor_from_seq)
     VALUES ($1, $2, $3, $4, $5, ${cursorFromSeqNow}) RETURNING ${endpointColumns}`,
    [id, input.tenant, input.url, input.enabledEvents, input.description],
  );
  const endpoint = endpointFromRow(inserted.rows[0]!);
  const secret = { id: newSecretId(), value: newSigningSecret() };
  await client.query('INSERT INTO webhook_endpoint_secrets (id, endpoint_id, secret) VALUES ($1, $2, $3)', [secret.id, endpoint.id, secret.value]);
  return { endpoint, secret };
}

/** What a create under an Idempotency-Key recorded (webhook_endpoint_creations), to judge and answer a retry. */
export interface EndpointCreation {
  /** The first request's fingerprint. */
  fingerprint: string;
  endpointId: string;
  /** The endpoint as the first answer showed it (its wire form), without the secret. */
  answer: Record<string, unknown>;
  /** The secret the first answer carried; null once the endpoint, and with it its secrets, was deleted. */
  secret: string | null;
}

type Queryable = LedgerPool | pg.PoolClient;

/** The create recorded under (tenant, key), or null when the key was never used to create an endpoint. */
export async function readEndpointCreation(db: Queryable, tenant: string, idempotencyKey: string): Promise<EndpointCreation | null> {
  const result = await db.query<{ fingerprint: string; endpoint_id: string; answer: Record<string, unknown>; secret: string | null }>(
    `SELECT c.fingerprint, c.endpoint_id, c.answer, s.secret
       FROM webhook_endpoint_creations c LEFT JOIN webhook_endpoint_secrets s ON s.id = c.secret_id
      WHERE c.tenant = $1 AND c.idempotency_key = $2`,
    [tenant, idempotencyKey],
  );
  const row = result.rows[0];
  return row ? { fingerprint: row.fingerprint, endpointId: row.endpoint_id, answer: row.answer, secret: row.secret } : null;
}

export interface EndpointCreationKey {
  idempotencyKey: string;
  /** The request's fingerprint, recorded to judge a retry. */
  fingerprint: string;
  /** The id the key names (derived from it by the caller). */
  endpointId: string;
  /** The endpoint as the answer shows it (never a secret), recorded for a replay. */
  answer: (endpoint: WebhookEndpoint) => Record<string, unknown>;
}

/**
 * Creates the endpoint once per (tenant, Idempotency-Key): under the tenant's endpoint lock, the key's
 * record is read first, and when it exists nothing is created and the record is returned for the
 * caller to judge (the same request: a replay; another: a conflict). Otherwise the endpoint, its
 * secret and the record are written in one transaction, so there is no endpoint without its key
 * nor a key without its endpoint. A replay is answered even when the tenant is at its endpoint limit.
 */
export async function createEndpointOnce(
  pool: LedgerPool,
  input: NewEndpoint,
  endpointsPerTenantMax: number,
  key: EndpointCreationKey,
): Promise<{ created: { endpoint: WebhookEndpoint; secret: string } } | { recorded: EndpointCreation }> {
  return inTransaction(pool, async (client) => {
    await lockTenantEndpoints(client, input.tenant);
    const recorded = await readEndpointCreation(client, input.tenant, key.idempotencyKey);
    if (recorded !== null) return { recorded };
    const { endpoint, secret } = await insertEndpoint(client, input, key.endpointId, endpointsPerTenantMax);
    await client.query(
      `INSERT INTO webhook_endpoint_creations (tenant, idempotency_key, fingerprint, endpoint_id, secret_id, answer)
       VALUES ($1, $2, $3, $4, $5, $6::jsonb)`,
      [input.tenant, key.idempotencyKey, key.fingerprint, endpoint.id, secret.id, JSON.stringify(key.answer(endpoint))],
    );
    return { created: { endpoint, secret: secret.value } };
  });
}

function newSecretId(): string {
  return `wes_${randomBytes(8).toString('hex')}`;
}

export async function getEndpoint(pool: LedgerPool, tenant: string, id: string): Promise<WebhookEndpoint | null> {
  const result = await pool.query<EndpointRow>(`SELECT ${endpointColumns} FROM webhook_endpoints WHERE tenant = $1 AND id = $2`, [tenant, id]);
  return result.rows[0] ? endpointFromRow(result.rows[0]) : null;
}

/** Newest first, keyset-paginated on (created_at, seq); the cursor is an endpoint of the tenant. */
export async function listEndpoints(
  pool: LedgerPool,
  tenant: string,
  page: { limit: number; cursor: { direction: 'after' | 'before'; id: string } | null },
): Promise<{ endpoints: WebhookEndpoint[]; hasMore: boolean }> {
  const params: unknown[] = [tenant];
  const cursor = page.cursor
    ? { direction: page.cursor.direction, row: `(SELECT created_at, seq FROM webhook_endpoints WHERE tenant = $1 AND id = $${params.push(page.cursor.id)})` }
    : null;
  const { rows, hasMore } = await keysetPage<EndpointRow>(pool, {
    from: 'webhook_endpoints',
    orderBy: ['created_at', 'seq'],
    newestFirst: true,
    conditions: ['tenant = $1'],
    params,
    cursor,
    limit: page.limit,
  });
  return { endpoints: rows.map(endpointFromRow), hasMore };
}

export interface EndpointChanges {
  url?: string;
  enabledEvents?: string[];
  description?: string | null;
  disabled?: boolean;
}

/**
 * Changes what is given. `disabled: true` stops deliveries (reason `requested`); `disabled: false`
 * enables it again, whatever disabled it, and starts its failure clock afresh. Null when the tenant
 * has no such endpoint.
 */
export async function updateEndpoint(pool: LedgerPool, tenant: string, id: string, changes: EndpointChanges): Promise<WebhookEndpoint | null> {
  const sets: string[] = ['updated_at = now()'];
  const params: unknown[] = [tenant, id];
  const param = (value: unknown): string => `$${params.push(value)}`;
  if (changes.url !== undefined) sets.push(`url = ${param(changes.url)}`);
  if (changes.enabledEvents !== undefined) sets.push(`enabled_events = ${param(changes.enabledEvents)}`);
  if (changes.description !== undefined) sets.push(`description = ${param(changes.description)}`);
  if (changes.disabled === true) {
    // Already disabled (by a 410, say): its reason and time stay what they were.
    sets.push("disabled_reason = coalesce(disabled_reason, 'requested')", 'disabled_at = coalesce(disabled_at, now())');
  } else if (changes.disabled === false) {
    // Events written while it was disabled are not its: a disabled endpoint's cursor moves to the
    // current position (an enabled one's stays where it is, so nothing is skipped).
    sets.push(
      'cursor_xact = CASE WHEN disabled_at IS NULL THEN cursor_xact ELSE pg_snapshot_xmin(pg_current_snapshot()) END',
      'cursor_seq = CASE WHEN disabled_at IS NULL THEN cursor_seq ELSE 0 END',
      `cursor_from_seq = CASE WHEN disabled_at IS NULL THEN cursor_from_seq ELSE ${cursorFromSeqNow} END`,
      'disabled_reason = NULL',
      'disabled_at = NULL',
      'failing_since = NULL',
    );
  }
  const result = await pool.query<EndpointRow>(
    `UPDATE webhook_endpoints SET ${sets.join(', ')} WHERE tenant = $1 AND id = $2 RETURNING ${endpointColumns}`,
    params,
  );
  return result.rows[0] ? endpointFromRow(result.rows[0]) : null;
}

/** Deletes the endpoint, its secrets, its deliveries not yet made and its attempts; false when none. */
export async function deleteEndpoint(pool: LedgerPool, tenant: string, id: string): Promise<boolean> {
  const result = await pool.query('DELETE FROM webhook_endpoints WHERE tenant = $1 AND id = $2', [tenant, id]);
  return (result.rowCount ?? 0) > 0;
}

/**
 * A new signing secret; the endpoint's live ones keep signing until `overlapMs` from now (0: the
 * new one alone from now on). At most `liveSecretsMax` sign at once: beyond it the oldest stop now.
 */
export async function rotateSecret(
  pool: LedgerPool,
  tenant: string,
  id: string,
  overlapMs: number,
  liveSecretsMax: number,
): Promise<{ secret: string; previousExpireAt: Date } | null> {
  return inTransaction(pool, async (client) => {
    const endpoint = await client.query('SELECT 1 FROM webhook_endpoints WHERE tenant = $1 AND id = $2 FOR UPDATE', [tenant, id]);
    if (endpoint.rowCount === 0) return null;
    const ended = await client.query<{ at: Date }>(
      `UPDATE webhook_endpoint_secrets SET expires_at = least(coalesce(expires_at, 'infinity'), now() + $2 * interval '1 millisecond')
        WHERE endpoint_id = $1 AND (expires_at IS NULL OR expires_at > now())
        RETURNING now() + $2 * interval '1 millisecond' AS at`,
      [id, overlapMs],
    );
    // The oldest live secrets beyond the bound (the new one counts) stop now.
    await client.query(
      `UPDATE webhook_endpoint_secrets SET expires_at = now()
        WHERE id IN (SELECT id FROM webhook_endpoint_secrets WHERE endpoint_id = $1 AND expires_at > now()
                      ORDER BY created_at DESC, id DESC OFFSET $2)`,
      [id, Math.max(0, liveSecretsMax - 1)],
    );
    const secret = newSigningSecret();
    await client.query('INSERT INTO webhook_endpoint_secrets (id, endpoint_id, secret) VALUES ($1, $2, $3)', [newSecretId(), id, secret]);
    await client.query('UPDATE webhook_endpoints SET updated_at = now() WHERE id = $1', [id]);
    return { secret, previousExpireAt: ended.rows[0]?.at ?? new Date() };
  });
}

export interface DeliveryAttempt {
  id: number;
  deliveryId: number;
  eventId: string;
  attempt: number;
  startedAt: Date;
  durationMs: number;
  statusCode: number | null;
  error: string | null;
  delivered: boolean;
  /** The delivery's state now. */
  deliveryState: 'pending' | 'delivered' | 'failed';
  requested: boolean;
}

/** An endpoint's latest attempts, newest first; null when the tenant has no such endpoint. */
export async function listAttempts(pool: LedgerPool, tenant: string, endpointId: string, limit: number): Promise<DeliveryAttempt[] | null> {
  if ((await getEndpoint(pool, tenant, endpointId)) === null) return null;
  const result = await pool.query<{
    id: number;
    delivery_id: number;
    event_id: string;
    attempt: number;
    started_at: Date;
    duration_ms: number;
    status_code: number | null;
    error: string | null;
    delivered: boolean;
    state: DeliveryAttempt['deliveryState'];
    requested: boolean;
  }>(
    `SELECT a.id, a.delivery_id, a.event_id, a.attempt, a.started_at, a.duration_ms, a.status_code, a.error, a.delivered, d.state, d.requested
       FROM webhook_delivery_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
      WHERE a.endpoint_id = $1 ORDER BY a.id DESC LIMIT $2`,
    [endpointId, limit],
  );
  return result.rows.map((row) => ({
    id: row.id,
    deliveryId: row.delivery_id,
    eventId: row.event_id,
    attempt: row.attempt,
    startedAt: row.started_at,
    durationMs: row.duration_ms,
    statusCode: row.status_code,
    error: row.error,
    delivered: row.delivered,
    deliveryState: row.state,
    requested: row.requested,
  }));
}

/**
 * Sends an event of the tenant to the endpoint again: a new delivery, due now. `endpoint` or
 * `event` when the tenant has no such endpoint or event; a disabled endpoint is refused by the caller.
 */
export async function requestRedelivery(
  pool: LedgerPool,
  tenant: string,
  endpointId: string,
  eventId: string,
): Promise<{ deliveryId: number } | 'endpoint' | 'event'> {
  const result = await pool.query<{ endpoint: boolean; event: boolean; id: number | null }>(
    `WITH endpoint AS (SELECT id FROM webhook_endpoints WHERE tenant = $1 AND id = $2),
          event AS (SELECT id FROM events WHERE tenant = $1 AND id = $3),
          inserted AS (
            INSERT INTO webhook_deliveries (endpoint_id, event_id, tenant, requested)
            SELECT endpoint.id, event.id, $1, true FROM endpoint, event RETURNING id)
     SELECT EXISTS (SELECT 1 FROM endpoint) AS endpoint, EXISTS (SELECT 1 FROM event) AS event, (SELECT id FROM inserted) AS id`,
    [tenant, endpointId, eventId],
  );
  const row = result.rows[0]!;
  if (!row.endpoint) return 'endpoint';
  if (!row.event) return 'event';
  return { deliveryId: row.id! };
}

// ---------------------------------------------------------------------------------------------
// The deliverer's side (src/outbound/deliverer.ts).

/** The events table's row, as the renderer of an event's body (src/service/events.ts, renderEvent) takes it. */
export type { EventRow };

/** A delivery claimed for one attempt, with everything the attempt needs. */
export interface ClaimedDelivery {
  id: number;
  endpointId: string;
  tenant: string;
  url: string;
  /** This attempt's number (1 for the first). */
  attempt: number;
  createdAt: Date;
  event: EventRow;
  /** The secrets that sign now (one, or several during a rotation's overlap). */
  secrets: string[];
}

export interface ClaimLimits {
  /** Who claims: a lease names its owner, so only the owner's outcome moves the row on. */
  owner: string;
  /** How long the claim holds; a process that dies leaves it to expire, after which another claims it. */
  leaseMs: number;
  /** Deliveries in flight to one endpoint at once, across every process. */
  perEndpointMax: number;
  /** Deliveries this call may claim. */
  max: number;
  /** Claim only these tenants' deliveries (a deliverer dedicated to some tenants; tests); all when absent. */
  onlyTenants?: readonly string[];
}

interface ClaimRow {
  id: number;
  endpoint_id: string;
  tenant: string;
  url: string;
  attempts: number;
  created_at: Date;
  event_seq: number;
  event_id: string;
  event_type: string;
  event_object_type: string;
  event_object_id: string;
  event_object_sequence: number;
  event_data: EventRow['data'];
  event_created_at: Date;
  secrets: string[];
}

/**
 * Claims up to `max` due deliveries of enabled endpoints, leasing them to `owner`, never more than
 * `perEndpointMax` in flight to one endpoint (leases not yet expired count, whoever holds them).
 * One round trip: the ledger function webhook_deliveries_claim takes the claims' advisory lock (so
 * two processes cannot both see an endpoint's last free slot), leases the rows, and returns each
 * with its event and its endpoint's live secrets. `delivered`: successes not yet recorded, recorded
 * first in the same transaction (webhook_deliveries_delivered_then_claim), all or none with the
 * claim; their slots count as free for it.
 */
export async function claimDeliveries(pool: LedgerPool, limits: ClaimLimits, delivered: readonly DeliveredAttempt[] = []): Promise<ClaimedDelivery[]> {
  if (limits.max <= 0 && delivered.length === 0) return [];
  const claimArgs = [limits.owner, limits.leaseMs, limits.perEndpointMax, limits.max, limits.onlyTenants ?? null];
  // Unnamed: a prepared statement of `SELECT *` would fail for good on its connection once the
  // function's columns change (a new release); the function's own statements keep their plans.
  const result =
    delivered.length === 0
      ? await pool.query<ClaimRow>('SELECT * FROM webhook_deliveries_claim($1, $2, $3, $4, $5)', claimArgs)
      : await pool.query<ClaimRow>(
          'SELECT * FROM webhook_deliveries_delivered_then_claim($1::bigint[], $2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::int[], $7::int[], $8, $9, $10, $11, $12)',
          [...deliveredArrays(delivered), ...claimArgs],
        );
  return result.rows.map(claimedFromRow);
}

function claimedFromRow(row: ClaimRow): ClaimedDelivery {
  return {
    id: row.id,
    endpointId: row.endpoint_id,
    tenant: row.tenant,
    url: row.url,
    attempt: row.attempts,
    createdAt: row.created_at,
    event: {
      seq: row.event_seq,
      id: row.event_id,
      tenant: row.tenant,
      type: row.event_type,
      object_type: row.event_object_type,
      object_id: row.event_object_id,
      object_sequence: row.event_object_sequence,
      data: row.event_data,
      created_at: row.event_created_at,
    },
    secrets: row.secrets,
  };
}

/** A position in an endpoint's cursor order over its tenant's events: (the writing transaction's id, seq). */
export interface CursorPosition {
  /** xid8, as text. */
  xact: string;
  seq: number;
}

/** Events after an endpoint's cursor, leased to this process for one batch of first attempts. */
export interface CursorBatch {
  endpointId: string;
  tenant: string;
  url: string;
  /** The secrets that sign now (one, or several during a rotation's overlap). */
  secrets: string[];
  /** The cursor when the batch was taken: it is recorded only if the cursor is still there. */
  from: CursorPosition;
  /** Where the cursor moves once the batch is recorded (past events the endpoint does not subscribe to too). */
  to: CursorPosition;
  /** Attempts this batch may have in flight at once: its share of the endpoint's bound. */
  slots: number;
  /** When the batch was taken (its lease runs from about then). */
  takenAt: Date;
  /** The events to send, in cursor order, each with its position. */
  events: Array<{ event: EventRow; position: CursorPosition }>;
}

/** What one attempt to send an event came to, in either lane. */
export interface AttemptResult {
  eventId: string;
  startedAt: Date;
  durationMs: number;
  statusCode: number | null;
  error: string | null;
  /** A 2xx. */
  delivered: boolean;
  /** A 410 Gone: the endpoint is disabled. */
  gone: boolean;
  /** After a failure, when the retry lane tries again; null: it fails for good (410, or no window left). */
  retryAt: Date | null;
}

/** One first attempt of a cursor batch. */
export type BatchAttempt = AttemptResult;

/** A batch whose attempts are over: `to` is where the cursor moves (the last event attempted, or the batch's end). */
export interface FinishedBatch {
  endpointId: string;
  from: CursorPosition;
  to: CursorPosition;
  attempts: BatchAttempt[];
}

export interface TakeLimits extends ClaimLimits {
  /** Events of a tenant one cursor batch reads at most (those its endpoint subscribes to are sent). */
  batchEventsMax: number;
}

/** What the deliverer has finished and not recorded yet, recorded by its next take. */
export interface CarriedOutcomes {
  /** Successes of the retry lane. */
  delivered: readonly DeliveredAttempt[];
  /** Cursor batches whose attempts all succeeded (a batch with a failure is recordCursorBatches' own). */
  batches: readonly FinishedBatch[];
}

interface TakeRow extends ClaimRow {
  lane: 'retry' | 'cursor';
  event_xact: string | null;
  batch_from_xact: string | null;
  batch_from_seq: string | number | null;
  batch_to_xact: string | null;
  batch_to_seq: string | number | null;
  batch_slots: number | null;
}

/**
 * The deliverer's one round trip (the ledger function webhook_deliveries_take): records what it
 * carries (successes of the retry lane, cursor batches that all succeeded), then, under the claims'
 * lock, claims due retry rows and takes cursor batches for up to `max` slots in all, never more than
 * `perEndpointMax` in flight to one endpoint across every process (the two lanes count each other).
 * All or none: a take that fails records nothing it carried (leases expire; events are sent again).
 */
export async function takeWork(pool: LedgerPool, limits: TakeLimits, carried: CarriedOutcomes = { delivered: [], batches: [] }): Promise<{ retry: ClaimedDelivery[]; batches: CursorBatch[] }> {
  const attempts = carried.batches.flatMap((batch) => batch.attempts.map((attempt) => ({ batch, attempt })));
  if (attempts.some(({ attempt }) => !attempt.delivered || attempt.statusCode === null)) {
    throw new Error('a cursor batch with a failed attempt is recorded by recordCursorBatches, not carried by a take');
  }
  const result = await pool.query<TakeRow>(
    `SELECT * FROM webhook_deliveries_take($1::bigint[], $2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::int[], $7::int[],
       $8::text[], $9::xid8[], $10::bigint[], $11::xid8[], $12::bigint[],
       $13::text[], $14::text[], $15::timestamptz[], $16::int[], $17::int[],
       $18, $19, $20, $21, $22, $23)`,
    [
      ...deliveredArrays(carried.delivered),
      ...batchArrays(carried.batches),
      attempts.map(({ batch }) => batch.endpointId),
      attempts.map(({ attempt }) => attempt.eventId),
      attempts.map(({ attempt }) => attempt.startedAt),
      attempts.map(({ attempt }) => attempt.durationMs),
      attempts.map(({ attempt }) => attempt.statusCode),
      limits.owner,
      limits.leaseMs,
      limits.perEndpointMax,
      Math.max(limits.max, 0),
      limits.onlyTenants ?? null,
      limits.batchEventsMax,
    ],
  );
  const retry: ClaimedDelivery[] = [];
  const batches = new Map<string, CursorBatch>();
  for (const row of result.rows) {
    if (row.lane === 'retry') {
      retry.push(claimedFromRow(row));
      continue;
    }
    let batch = batches.get(row.endpoint_id);
    if (batch === undefined) {
      batch = {
        endpointId: row.endpoint_id,
        tenant: row.tenant,
        url: row.url,
        secrets: row.secrets,
        from: { xact: row.batch_from_xact!, seq: Number(row.batch_from_seq) },
        to: { xact: row.batch_to_xact!, seq: Number(row.batch_to_seq) },
        slots: row.batch_slots!,
        takenAt: row.created_at,
        events: [],
      };
      batches.set(row.endpoint_id, batch);
    }
    batch.events.push({ event: claimedFromRow(row).event, position: { xact: row.event_xact!, seq: Number(row.event_seq) } });
  }
  return { retry, batches: [...batches.values()] };
}

function batchArrays(batches: readonly FinishedBatch[]): unknown[] {
  return [
    batches.map((b) => b.endpointId),
    batches.map((b) => b.from.xact),
    batches.map((b) => b.from.seq),
    batches.map((b) => b.to.xact),
    batches.map((b) => b.to.seq),
  ];
}

/**
 * Records finished cursor batches outside a take (a batch with a failure; the deliverer stopping):
 * webhook_cursor_batches_recorded writes each batch's rows and moves its cursor, if this owner still
 * holds it where the batch began; then, in the same transaction, each failure goes on as any failed
 * attempt does to its endpoint (endpointFailed, the retry lane's rule). Returns the endpoints whose
 * batch was recorded, and those a failure disabled.
 */
export async function recordCursorBatches(
  pool: LedgerPool,
  owner: string,
  batches: readonly FinishedBatch[],
  failures: { disableAfterFailingMs: number; renderEndpoint: (endpoint: WebhookEndpoint) => unknown },
): Promise<{ recorded: string[]; disabled: Array<{ endpointId: string; reason: EndpointDisabledReason }> }> {
  if (batches.length === 0) return { recorded: [], disabled: [] };
  const attempts = batches.flatMap((batch) => batch.attempts.map((attempt) => ({ batch, attempt })));
  return inDelivererTransaction(pool, async (client) => {
    const result = await client.query<{ endpoint_id: string }>(
      `SELECT endpoint_id FROM webhook_cursor_batches_recorded($1, $2::text[], $3::xid8[], $4::bigint[], $5::xid8[], $6::bigint[],
         $7::text[], $8::text[], $9::timestamptz[], $10::int[], $11::int[], $12::text[], $13::boolean[], $14::timestamptz[])`,
      [
        owner,
        ...batchArrays(batches),
        attempts.map(({ batch }) => batch.endpointId),
        attempts.map(({ attempt }) => attempt.eventId),
        attempts.map(({ attempt }) => attempt.startedAt),
        attempts.map(({ attempt }) => attempt.durationMs),
        attempts.map(({ attempt }) => attempt.statusCode),
        attempts.map(({ attempt }) => attempt.error),
        attempts.map(({ attempt }) => attempt.delivered),
        attempts.map(({ attempt }) => attempt.retryAt),
      ],
    );
    const recorded = result.rows.map((row) => row.endpoint_id);
    const disabled: Array<{ endpointId: string; reason: EndpointDisabledReason }> = [];
    for (const batch of batches) {
      if (!recorded.includes(batch.endpointId)) continue;
      // The run of failures is what came after the batch's last success (the record ended any run
      // before it); a 410 disables whatever came after it.
      const lastSuccess = Math.max(...batch.attempts.filter((a) => a.delivered).map((a) => a.startedAt.getTime()), Number.NEGATIVE_INFINITY);
      const failed = batch.attempts.filter((a) => !a.delivered && (a.gone || a.startedAt.getTime() > lastSuccess));
      if (failed.length === 0) continue;
      const firstFailure = new Date(Math.min(...failed.map((a) => a.startedAt.getTime())));
      const reason = await endpointFailed(client, batch.endpointId, firstFailure, failed.some((a) => a.gone), failures.disableAfterFailingMs, failures.renderEndpoint);
      if (reason !== null) disabled.push({ endpointId: batch.endpointId, reason });
    }
    return { recorded, disabled };
  });
}

/** Events of the endpoint's tenant it subscribes to that its cursor has not passed yet (tests, the chaos verdict). */
export async function eventsBehindCursor(pool: LedgerPool, endpointId: string): Promise<number> {
  const result = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM webhook_endpoints e JOIN events ev
         ON ev.tenant = e.tenant AND ev.xact_id IS NOT NULL AND (ev.xact_id, ev.seq) > (e.cursor_xact, e.cursor_seq) AND ev.seq > e.cursor_from_seq
        AND (ev.type = ANY (e.enabled_events) OR '*' = ANY (e.enabled_events))
      WHERE e.id = $1 AND e.disabled_at IS NULL`,
    [endpointId],
  );
  return result.rows[0]!.n;
}

export interface AttemptOutcome extends AttemptResult {
  deliveryId: number;
  endpointId: string;
  attempt: number;
  owner: string;
  /** An endpoint failing at least this long (since its first failure in a row) is disabled. */
  disableAfterFailingMs: number;
}

/** A successful attempt (a 2xx), as recordDelivered takes it. */
export type DeliveredAttempt = Pick<AttemptOutcome, 'deliveryId' | 'endpointId' | 'eventId' | 'attempt' | 'startedAt' | 'durationMs'> & { statusCode: number };

/**
 * Records successful attempts, each with its delivery moved to delivered and its endpoint's run of
 * failures ended, in one statement (the ledger function webhook_deliveries_delivered): one round
 * trip for however many finished close together, all or none. Recorded whoever holds the lease now.
 */
export async function recordDelivered(pool: LedgerPool, attempts: readonly DeliveredAttempt[]): Promise<void> {
  if (attempts.length === 0) return;
  await pool.query('SELECT webhook_deliveries_delivered($1::bigint[], $2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::int[], $7::int[])', deliveredArrays(attempts));
}

/** The successes as the ledger functions take them: parallel arrays, one element per attempt. */
function deliveredArrays(attempts: readonly DeliveredAttempt[]): unknown[] {
  return [
    attempts.map((a) => a.deliveryId),
    attempts.map((a) => a.endpointId),
    attempts.map((a) => a.eventId),
    attempts.map((a) => a.attempt),
    attempts.map((a) => a.startedAt),
    attempts.map((a) => a.durationMs),
    attempts.map((a) => a.statusCode),
  ];
}

/**
 * Records an attempt and moves its delivery on, in one transaction: delivered (recordDelivered's
 * single statement); failed for good (410, or no retry left), or due again at `retryAt`. A failure
 * that ends the endpoint's patience (410, or failing for `disableAfterFailingMs`) disables it and
 * writes a `webhook_endpoint.disabled` event in the same transaction. Only the lease's owner moves a
 * pending delivery back to pending (another process may hold it now); a success is recorded whoever
 * holds it. Returns whether this attempt disabled the endpoint.
 */
export async function recordAttempt(pool: LedgerPool, outcome: AttemptOutcome, renderEndpoint: (endpoint: WebhookEndpoint) => unknown): Promise<{ disabled: EndpointDisabledReason | null }> {
  if (outcome.delivered) {
    if (outcome.statusCode === null) throw new Error(`attempt ${outcome.attempt} of delivery ${outcome.deliveryId} is delivered without a status code`);
    await recordDelivered(pool, [{ ...outcome, statusCode: outcome.statusCode }]);
    return { disabled: null };
  }
  return inDelivererTransaction(pool, async (client) => {
    await client.query(
      `INSERT INTO webhook_delivery_attempts (delivery_id, endpoint_id, event_id, attempt, started_at, duration_ms, status_code, error, delivered)
       SELECT $1, $2, $3, $4, $5, $6, $7, $8, false WHERE EXISTS (SELECT 1 FROM webhook_deliveries WHERE id = $1)`,
      [outcome.deliveryId, outcome.endpointId, outcome.eventId, outcome.attempt, outcome.startedAt, outcome.durationMs, outcome.statusCode, outcome.error?.slice(0, 500) ?? null],
    );
    const giveUp = outcome.gone || outcome.retryAt === null;
    await client.query(
      giveUp
        ? `UPDATE webhook_deliveries SET state = 'failed', finished_at = now(), lease_owner = NULL, lease_expires_at = NULL
            WHERE id = $1 AND state = 'pending' AND lease_owner = $2`
        : `UPDATE webhook_deliveries SET next_attempt_at = $3, lease_owner = NULL, lease_expires_at = NULL
            WHERE id = $1 AND state = 'pending' AND lease_owner = $2`,
      giveUp ? [outcome.deliveryId, outcome.owner] : [outcome.deliveryId, outcome.owner, outcome.retryAt],
    );
    return { disabled: await endpointFailed(client, outcome.endpointId, outcome.startedAt, outcome.gone, outcome.disableAfterFailingMs, renderEndpoint) };
  });
}

/**
 * What a failed attempt does to its endpoint, in the caller's transaction (both lanes: a retry's
 * record, a cursor batch's): its run of failures goes on (or starts at `startedAt`), and a 410, or a
 * run longer than `disableAfterFailingMs`, disables it with its `webhook_endpoint.disabled` event.
 * Returns the reason it was disabled for, or null.
 */
async function endpointFailed(
  client: pg.PoolClient,
  endpointId: string,
  startedAt: Date,
  gone: boolean,
  disableAfterFailingMs: number,
  renderEndpoint: (endpoint: WebhookEndpoint) => unknown,
): Promise<EndpointDisabledReason | null> {
  const endpoint = await client.query<{ failing_ms: number; disabled: boolean }>(
    `UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, $2)
      WHERE id = $1 RETURNING (extract(epoch FROM now() - failing_since) * 1000)::float8 AS failing_ms, disabled_at IS NOT NULL AS disabled`,
    [endpointId, startedAt],
  );
  const row = endpoint.rows[0];
  if (row === undefined || row.disabled) return null;
  const reason: EndpointDisabledReason | null = gone ? 'gone' : row.failing_ms >= disableAfterFailingMs ? 'failing' : null;
  if (reason === null) return null;
  await disableEndpointWithEvent(client, endpointId, reason, renderEndpoint);
  return reason;
}

/** Disables the endpoint and writes its `webhook_endpoint.disabled` event, in the caller's transaction. */
async function disableEndpointWithEvent(
  client: pg.PoolClient,
  endpointId: string,
  reason: EndpointDisabledReason,
  renderEndpoint: (endpoint: WebhookEndpoint) => unknown,
): Promise<void> {
  const updated = await client.query<EndpointRow>(
    `UPDATE webhook_endpoints SET disabled_at = now(), disabled_reason = $2, updated_at = now()
      WHERE id = $1 AND disabled_at IS NULL RETURNING ${endpointColumns}`,
    [endpointId, reason],
  );
  const row = updated.rows[0];
  if (row === undefined) return;
  const endpoint = endpointFromRow(row);
  // The endpoint's events are numbered like any object's: a consumer keeps the latest.
  await client.query(
    `INSERT INTO events (id, tenant, type, object_type, object_id, object_sequence, data)
     SELECT $1, $2, 'webhook_endpoint.disabled', 'webhook_endpoint', $3,
            coalesce((SELECT max(object_sequence) FROM events WHERE tenant = $2 AND object_id = $3), 0) + 1,
            jsonb_build_object('object', $4::jsonb)`,
    [newEventId(), endpoint.tenant, endpoint.id, JSON.stringify(renderEndpoint(endpoint))],
  );
}

/** Counts of one endpoint's deliveries by state, and of its attempts (tests, the chaos verdict). */
export async function deliveryCounts(pool: LedgerPool, endpointId: string): Promise<{ pending: number; delivered: number; failed: number; attempts: number }> {
  const result = await pool.query<{ pending: number; delivered: number; failed: number; attempts: number }>(
    `SELECT count(*) FILTER (WHERE state = 'pending')::int AS pending,
            count(*) FILTER (WHERE state = 'delivered')::int AS delivered,
            count(*) FILTER (WHERE state = 'failed')::int AS failed,
            (SELECT count(*)::int FROM webhook_delivery_attempts WHERE endpoint_id = $1) AS attempts
       FROM webhook_deliveries WHERE endpoint_id = $1`,
    [endpointId],
  );
  return result.rows[0]!;
}

/** What one pruning statement deleted. */
export interface PrunedDeliveries {
  deliveries: number;
  attempts: number;
}

/**
 * Deletes up to `batchSize` deliveries that finished (delivered, or failed for good) more than
 * `retentionMs` ago, oldest first, with their attempts, in one statement (its own short
 * transaction). Pending deliveries are never deleted, whatever their age; events are never deleted
 * (append-only). Rows another process is deleting at the same moment are skipped, not waited for,
 * so several workers pruning at once share the work instead of queueing on each other's locks.
 */
export async function pruneFinishedDeliveries(pool: LedgerPool, limits: { retentionMs: number; batchSize: number }): Promise<PrunedDeliveries> {
  const result = await pool.query<{ deliveries: number; attempts: number }>(
    `WITH doomed AS (
       SELECT id FROM webhook_deliveries
        WHERE finished_at < now() - $1 * interval '1 millisecond'
        ORDER BY finished_at, id LIMIT $2
        FOR UPDATE SKIP LOCKED),
     attempts AS (DELETE FROM webhook_delivery_attempts WHERE delivery_id IN (SELECT id FROM doomed) RETURNING 1),
     deliveries AS (DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM doomed) RETURNING 1)
     SELECT (SELECT count(*)::int FROM deliveries) AS deliveries, (SELECT count(*)::int FROM attempts) AS attempts`,
    [limits.retentionMs, limits.batchSize],
  );
  return result.rows[0]!;
}
