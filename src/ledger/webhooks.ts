import type pg from 'pg';
import type { LedgerPool } from './pool.js';
import { asLedgerRefusal } from './errors.js';

/**
 * Provider callbacks that credit money: the providers' signing secrets, and the events that
 * credited (table webhook_events, one row per (provider, event id) across all tenants).
 */

export interface WebhookSecretRecord {
  id: string;
  provider: string;
  createdAt: string;
  /** After this instant the secret verifies nothing (set by a rotation); null: no end. */
  expiresAt: string | null;
  revokedAt: string | null;
}

/** A secret that verifies callbacks now, with its value: for the signature check only. */
export interface ActiveWebhookSecret {
  id: string;
  secret: string;
}

interface SecretRow {
  id: string;
  provider: string;
  created_at: Date;
  expires_at: Date | null;
  revoked_at: Date | null;
}

// Every query of the listing names its columns: `secret` never leaves this module except through
// activeWebhookSecrets, so no listing can print one by accident.
const listedColumns = 'id, provider, created_at, expires_at, revoked_at';

function secretFromRow(row: SecretRow): WebhookSecretRecord {
  return {
    id: row.id,
    provider: row.provider,
    createdAt: row.created_at.toISOString(),
    expiresAt: row.expires_at?.toISOString() ?? null,
    revokedAt: row.revoked_at?.toISOString() ?? null,
  };
}

export async function insertWebhookSecret(
  pool: LedgerPool,
  secret: { id: string; provider: string; secret: string },
): Promise<WebhookSecretRecord> {
  const result = await pool.query<SecretRow>(
    `INSERT INTO webhook_secrets (id, provider, secret) VALUES ($1, $2, $3) RETURNING ${listedColumns}`,
    [secret.id, secret.provider, secret.secret],
  );
  return secretFromRow(result.rows[0]!);
}

/**
 * Adds the new secret and makes every secret of the provider that verifies now expire after
 * `overlapSeconds` (one that already expires sooner keeps its earlier end), in one transaction: a
 * rotation never leaves the provider with no secret or with the old ones forever.
 */
export async function rotateWebhookSecret(
  pool: LedgerPool,
  secret: { id: string; provider: string; secret: string },
  overlapSeconds: number,
): Promise<{ created: WebhookSecretRecord; expiring: WebhookSecretRecord[] } | null> {
  return inTransaction<{ created: WebhookSecretRecord; expiring: WebhookSecretRecord[] } | null>(pool, async (client) => {
    const expiring = await client.query<SecretRow>(
      `UPDATE webhook_secrets
          SET expires_at = least(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $2))
        WHERE provider = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
        RETURNING ${listedColumns}`,
      [secret.provider, overlapSeconds],
    );
    if (expiring.rows.length === 0) return { rollback: null };
    const created = await client.query<SecretRow>(
      `INSERT INTO webhook_secrets (id, provider, secret) VALUES ($1, $2, $3) RETURNING ${listedColumns}`,
      [secret.id, secret.provider, secret.secret],
    );
    return { commit: { created: secretFromRow(created.rows[0]!), expiring: expiring.rows.map(secretFromRow).sort(byCreation) } };
  });
}

function byCreation(a: WebhookSecretRecord, b: WebhookSecretRecord): number {
  return a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id);
}

export async function listWebhookSecrets(pool: LedgerPool, provider: string | null): Promise<WebhookSecretRecord[]> {
  const result = await pool.query<SecretRow>(
    `SELECT ${listedColumns} FROM webhook_secrets WHERE ($1::text IS NULL OR provider = $1) ORDER BY provider, created_at, id`,
    [provider],
  );
  return result.rows.map(secretFromRow);
}

/** Revoking is permanent and immediate; revoking again keeps the first revocation's time. */
export async function revokeWebhookSecret(pool: LedgerPool, id: string): Promise<WebhookSecretRecord | null> {
  const result = await pool.query<SecretRow>(
    `UPDATE webhook_secrets SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 RETURNING ${listedColumns}`,
    [id],
  );
  return result.rows[0] ? secretFromRow(result.rows[0]) : null;
}

/** The provider's secrets that verify callbacks at this moment (the database's clock decides expiry). */
export async function activeWebhookSecrets(pool: LedgerPool, provider: string): Promise<ActiveWebhookSecret[]> {
  const result = await pool.query<ActiveWebhookSecret>(
    `SELECT id, secret FROM webhook_secrets
      WHERE provider = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
      ORDER BY created_at DESC, id`,
    [provider],
  );
  return result.rows;
}

/** What a verified deposit event asks the ledger to do. */
export interface WebhookCredit {
  provider: string;
  eventId: string;
  eventType: string;
  tenant: string;
  accountId: string;
  amountMinor: number;
  currency: string;
  /** The secret whose signature was accepted. */
  secretId: string;
}

/** The event as first recorded, with the deposit it made. */
export interface RecordedWebhookEvent {
  provider: string;
  eventId: string;
  eventType: string;
  tenant: string;
  accountId: string;
  amountMinor: number;
  currency: string;
  transferId: number;
  depositCreatedAt: string;
  receivedAt: string;
}

export type WebhookCreditOutcome =
  | { outcome: 'credited'; event: RecordedWebhookEvent }
  /** The event id was recorded before (by this request's twin, or long ago): nothing moved now. */
  | { outcome: 'recorded_before'; event: RecordedWebhookEvent }
  | { outcome: 'account_not_found' }
  | { outcome: 'currency_mismatch'; accountCurrency: string };

interface EventRow {
  provider: string;
  event_id: string;
  event_type: string;
  tenant: string;
  account_id: string;
  amount_minor: number;
  currency: string;
  transfer_id: number;
  deposit_created_at: Date;
  received_at: Date;
}

function eventFromRow(row: EventRow): RecordedWebhookEvent {
  return {
    provider: row.provider,
    eventId: row.event_id,
    eventType: row.event_type,
    tenant: row.tenant,
    accountId: row.account_id,
    amountMinor: row.amount_minor,
    currency: row.currency.trim(),
    transferId: row.transfer_id,
    depositCreatedAt: row.deposit_created_at.toISOString(),
    receivedAt: row.received_at.toISOString(),
  };
}

async function recordedEvent(db: LedgerPool | pg.ClientBase, provider: string, eventId: string): Promise<RecordedWebhookEvent | null> {
  const result = await db.query<EventRow>(
    `SELECT e.provider, e.event_id, e.event_type, e.tenant, e.account_id, e.amount_minor, e.currency, e.transfer_id,
            t.created_at AS deposit_created_at, e.received_at
       FROM webhook_events e JOIN transfers t ON t.id = e.transfer_id
      WHERE e.provider = $1 AND e.event_id = $2`,
    [provider, eventId],
  );
  return result.rows[0] ? eventFromRow(result.rows[0]) : null;
}

/** The deposit reference of a provider event: its own namespace beside `key:` and `external:`. */
export function webhookDepositReference(provider: string, eventId: string): string {
  return `webhook:${provider}:${eventId}`;
}

/**
 * Credits the event's amount exactly once per (provider, event id), whatever the tenant.
 *
 * One transaction: ledger_deposit (keyed by the event's reference within the tenant), then the
 * event row. The event row's primary key decides a race: a concurrent delivery of the same event
 * waits on it, finds the row once the first commits, and rolls its own deposit back, so a deposit
 * exists only beside its event row. A refusal (unknown account, wrong currency) writes nothing.
 */
export async function creditFromWebhook(pool: LedgerPool, credit: WebhookCredit): Promise<WebhookCreditOutcome> {
  // Most redeliveries arrive after the first delivery committed: answer them without a write.
  const earlier = await recordedEvent(pool, credit.provider, credit.eventId);
  if (earlier) return { outcome: 'recorded_before', event: earlier };

  const made = await inTransaction<WebhookCreditOutcome | 'lost_race'>(pool, async (client) => {
    const account = await client.query<{ currency: string }>(
      'SELECT currency FROM accounts WHERE tenant = $1 AND id = $2 AND NOT is_system',
      [credit.tenant, credit.accountId],
    );
    const accountCurrency = account.rows[0]?.currency.trim();
    if (accountCurrency === undefined) return { rollback: { outcome: 'account_not_found' } };
    if (accountCurrency !== credit.currency) return { rollback: { outcome: 'currency_mismatch', accountCurrency } };
    try {
      await client.query('SELECT * FROM ledger_deposit($1, $2, $3, $4, NULL)', [
        credit.tenant,
        credit.accountId,
        credit.amountMinor,
        webhookDepositReference(credit.provider, credit.eventId),
      ]);
    } catch (error) {
      // The same tenant's same event id, with another amount or account, committed meanwhile.
      if (asLedgerRefusal(error)?.refusal === 'idempotencyConflict') return { rollback: 'lost_race' };
      throw error;
    }
    const inserted = await client.query(
      `INSERT INTO webhook_events (provider, event_id, event_type, tenant, account_id, amount_minor, currency, transfer_id, secret_id)
       SELECT $1, $2, $3, $4, $5, $6, $7, t.id, $9
         FROM transfers t WHERE t.tenant = $4 AND t.kind = 'deposit' AND t.reference = $8
       ON CONFLICT (provider, event_id) DO NOTHING`,
      [
        credit.provider,
        credit.eventId,
        credit.eventType,
        credit.tenant,
        credit.accountId,
        credit.amountMinor,
        credit.currency,
        webhookDepositReference(credit.provider, credit.eventId),
        credit.secretId,
      ],
    );
    if (inserted.rowCount !== 1) return { rollback: 'lost_race' };
    const event = await recordedEvent(client, credit.provider, credit.eventId);
    if (!event) throw new Error(`webhook event ${credit.eventId} vanished inside the transaction that wrote it`);
    return { commit: { outcome: 'credited', event } };
  });
  if (made !== 'lost_race') return made;
  const winner = await recordedEvent(pool, credit.provider, credit.eventId);
  if (!winner) throw new Error(`webhook event ${credit.eventId} lost a race to a delivery that left no record`);
  return { outcome: 'recorded_before', event: winner };
}

/** Counts for one tenant, or all: what a refused callback must leave unchanged. */
export async function countWebhookEvents(pool: LedgerPool, tenant: string | null): Promise<number> {
  const result = await pool.query<{ n: number }>(
    'SELECT count(*)::bigint AS n FROM webhook_events WHERE ($1::text IS NULL OR tenant = $1)',
    [tenant],
  );
  return result.rows[0]!.n;
}

/**
 * Runs `body` in a transaction on one connection; it says whether to commit or roll back, and the
 * value to return either way. An error rolls back and is rethrown.
 */
async function inTransaction<T>(
  pool: LedgerPool,
  body: (client: pg.PoolClient) => Promise<{ commit: T } | { rollback: T }>,
): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    const decided = await body(client);
    if ('commit' in decided) {
      await client.query('COMMIT');
      return decided.commit;
    }
    await client.query('ROLLBACK');
    return decided.rollback;
  } catch (error) {
    try {
      await client.query('ROLLBACK');
    } catch (rollbackError) {
      // The connection is gone or unusable: it must not go back to the pool.
      broken = rollbackError as Error;
    }
    throw error;
  } finally {
    client.release(broken);
  }
}
