/**
 * The providers' events about provider charges, as the receiver recorded them (migration 190):
 * one row per (provider, event id), written once what the event led to was done.
 */
import { fromRow, type ChargeRow, type LedgerCharge } from './charges.js';
import type { LedgerPool } from './pool.js';

export const providerEventActions = [
  'signalled',
  'voided',
  'void_refused',
  'no_action',
  'no_charge',
  'not_ours',
  'not_a_payment',
  /** The provider's own record of the payment does not back the event's claim (migration 230). */
  'payment_mismatch',
] as const;
export type ProviderEventAction = (typeof providerEventActions)[number];

/** The longest `detail` the table keeps; longer ones are cut (they are for a person). */
export const providerEventDetailMaxLength = 2_000;

export interface ProviderEventRecord {
  provider: string;
  eventId: string;
  eventType: string;
  paymentId: string | null;
  /** The charge the event concerned; null when none of ours. */
  charge: { tenant: string; idempotencyKey: string } | null;
  action: ProviderEventAction;
  detail: string | null;
}

export interface RecordedProviderEvent extends ProviderEventRecord {
  receivedAt: string;
}

interface ProviderEventRow {
  provider: string;
  event_id: string;
  event_type: string;
  payment_id: string | null;
  tenant: string | null;
  charge_key: string | null;
  action: ProviderEventAction;
  detail: string | null;
  received_at: Date;
}

function fromEventRow(row: ProviderEventRow): RecordedProviderEvent {
  return {
    provider: row.provider,
    eventId: row.event_id,
    eventType: row.event_type,
    paymentId: row.payment_id,
    charge: row.tenant !== null && row.charge_key !== null ? { tenant: row.tenant, idempotencyKey: row.charge_key } : null,
    action: row.action,
    detail: row.detail,
    receivedAt: row.received_at.toISOString(),
  };
}

/** The event as first recorded, or null when this is its first delivery (or earlier ones failed). */
export async function readProviderEvent(pool: LedgerPool, provider: string, eventId: string): Promise<RecordedProviderEvent | null> {
  const { rows } = await pool.query<ProviderEventRow>('SELECT * FROM provider_events WHERE provider = $1 AND event_id = $2', [provider, eventId]);
  return rows[0] ? fromEventRow(rows[0]) : null;
}

/**
 * Records what an event led to. A delivery racing another of the same event finds the first
 * one's row and records nothing (`recorded: false`): the row keeps the first account of it.
 */
export async function recordProviderEvent(
  pool: LedgerPool,
  record: ProviderEventRecord,
): Promise<{ recorded: boolean; event: RecordedProviderEvent }> {
  const detail = record.detail === null ? null : record.detail.slice(0, providerEventDetailMaxLength);
  const inserted = await pool.query<ProviderEventRow>(
    `INSERT INTO provider_events (provider, event_id, event_type, payment_id, tenant, charge_key, action, detail)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
     ON CONFLICT (provider, event_id) DO NOTHING
     RETURNING *`,
    [record.provider, record.eventId, record.eventType, record.paymentId, record.charge?.tenant ?? null, record.charge?.idempotencyKey ?? null, record.action, detail],
  );
  if (inserted.rows[0]) return { recorded: true, event: fromEventRow(inserted.rows[0]) };
  const first = await readProviderEvent(pool, record.provider, record.eventId);
  if (!first) throw new Error(`provider event ${record.provider}/${record.eventId} conflicted on insert but cannot be read`);
  return { recorded: false, event: first };
}

/** A provider charge by the id our reference carries (charges.id is unique), within its tenant. */
export async function readProviderChargeById(pool: LedgerPool, tenant: string, chargeId: string): Promise<LedgerCharge | null> {
  const { rows } = await pool.query<ChargeRow>('SELECT * FROM charges WHERE id = $1 AND tenant = $2 AND provider IS NOT NULL', [chargeId, tenant]);
  return rows[0] ? fromRow(rows[0]) : null;
}
