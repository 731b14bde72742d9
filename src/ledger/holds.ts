import type { ChargeIntent } from '../domain/charge.js';
import { cancelHold, readCharge, type LedgerCharge } from './charges.js';
import type { Queryable } from './keyset.js';
import type { LedgerPool } from './pool.js';

/** A held charge's key, as the sweeper and reconcile page through them. */
export interface HeldChargeKey {
  tenant: string;
  idempotencyKey: string;
  /** With PostgreSQL's microseconds (a Date keeps milliseconds): the cursor must not repeat a row. */
  createdAt: string;
}

const createdAtMicros = `to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at`;

/**
 * TRIED holds at least `graceMs` past their expiry, the most overdue first. The database clock on
 * both sides of the comparison: hold_expires_at was written with now().
 */
export async function findExpiredHolds(
  pool: LedgerPool,
  options: { graceMs: number; limit: number; tenant?: string | null },
): Promise<HeldChargeKey[]> {
  const result = await pool.query<{ tenant: string; idempotency_key: string; created_at: string }>(
    `SELECT tenant, idempotency_key, ${createdAtMicros} FROM charges
      WHERE hold_state = 'TRIED' AND hold_expires_at < now() - $1 * interval '1 millisecond'
        AND ($3::text IS NULL OR tenant = $3)
      ORDER BY hold_expires_at LIMIT $2`,
    [options.graceMs, options.limit, options.tenant ?? null],
  );
  return result.rows.map(toKey);
}

/**
 * One page of TRIED holds at least `minAgeMs` old (by their last change), in a stable order:
 * (created_at, tenant, key) after the cursor, so a sweep pages through every hold once however
 * many there are, with one page in memory.
 */
export async function listHeldCharges(
  pool: LedgerPool,
  options: { minAgeMs: number; after: HeldChargeKey | null; limit: number; tenant?: string | null },
): Promise<HeldChargeKey[]> {
  const after = options.after;
  const result = await pool.query<{ tenant: string; idempotency_key: string; created_at: string }>(
    `SELECT tenant, idempotency_key, ${createdAtMicros} FROM charges
      WHERE hold_state = 'TRIED' AND updated_at <= now() - $1 * interval '1 millisecond'
        AND ($6::text IS NULL OR tenant = $6)
        AND ($2::timestamptz IS NULL OR (created_at, tenant, idempotency_key) > ($2::timestamptz, $3::text, $4::text))
      ORDER BY created_at, tenant, idempotency_key LIMIT $5`,
    [options.minAgeMs, after?.createdAt ?? null, after?.tenant ?? null, after?.idempotencyKey ?? null, options.limit, options.tenant ?? null],
  );
  return result.rows.map(toKey);
}

function toKey(row: { tenant: string; idempotency_key: string; created_at: string }): HeldChargeKey {
  return { tenant: row.tenant, idempotencyKey: row.idempotency_key, createdAt: row.created_at };
}

/** The charge's intent as the ledger recorded it: what Cancel needs to address the row. */
function intentOf(row: LedgerCharge): ChargeIntent {
  const c = row.charge;
  return {
    tenant: c.tenant,
    idempotencyKey: c.idempotencyKey,
    chargeId: c.id,
    fingerprint: row.fingerprint,
    request: {
      orderId: c.orderId,
      payerAccountId: c.payerAccountId,
      payeeAccountId: c.payeeAccountId,
      amountMinor: c.amountMinor,
      currency: c.currency,
      captureMode: c.captureMode,
      description: c.description,
      metadata: c.metadata,
    },
  };
}

/**
 * Voids a hold through the ledger's idempotent Cancel, with the values the ledger itself recorded
 * (so they are values it accepts). A hold that is no longer TRIED is left as it is and returned;
 * a key the ledger has never seen answers null and records nothing: releasing is not cancelling
 * in advance. `released` is true when this call's Cancel is the one that voided the hold.
 */
export async function releaseHold(
  pool: LedgerPool,
  tenant: string,
  idempotencyKey: string,
  reason: string,
): Promise<{ released: boolean; row: LedgerCharge | null }> {
  const row = await readCharge(pool, tenant, idempotencyKey);
  if (!row || row.holdState !== 'TRIED') return { released: false, row };
  const after = await cancelHold(pool, intentOf(row), reason);
  return { released: after.holdState === 'CANCELLED' && after.charge.failureReason === reason, row: after };
}

/** Holds still TRIED past their expiry: how many, and how far past the oldest is. */
export interface OverdueHolds {
  count: number;
  heldMinor: number;
  oldestOverdueSeconds: number;
}

export async function overdueHolds(pool: LedgerPool): Promise<OverdueHolds> {
  const result = await pool.query<{ n: number; held_minor: number | null; oldest_s: number | null }>(
    `SELECT count(*)::bigint AS n, sum(held_minor)::bigint AS held_minor,
            extract(epoch FROM now() - min(hold_expires_at))::float8 AS oldest_s
       FROM charges WHERE hold_state = 'TRIED' AND hold_expires_at < now()`,
  );
  const row = result.rows[0];
  return { count: row?.n ?? 0, heldMinor: row?.held_minor ?? 0, oldestOverdueSeconds: row?.oldest_s ?? 0 };
}

/** A hold still TRIED past its expiry plus grace, as reconcile reports it. */
export interface ExpiredHoldSample {
  tenant: string;
  idempotency_key: string;
  hold_expires_at: Date;
}

/**
 * How many TRIED holds are more than `graceMs` past their expiry, and the `sampleLimit` most
 * overdue of them, without reading the rest. The database clock on both sides of the comparison.
 */
export async function countExpiredHolds(
  pool: Queryable,
  options: { tenant: string | null; graceMs: number; sampleLimit: number },
): Promise<{ count: number; samples: ExpiredHoldSample[] }> {
  const result = await pool.query<ExpiredHoldSample & { total: number }>(
    `SELECT tenant, idempotency_key, hold_expires_at, count(*) OVER ()::bigint AS total FROM charges
      WHERE hold_state = 'TRIED' AND ($1::text IS NULL OR tenant = $1)
        AND hold_expires_at < now() - $2 * interval '1 millisecond'
      ORDER BY hold_expires_at LIMIT $3`,
    [options.tenant, options.graceMs, options.sampleLimit],
  );
  return {
    count: result.rows[0]?.total ?? 0,
    samples: result.rows.map(({ tenant, idempotency_key, hold_expires_at }) => ({ tenant, idempotency_key, hold_expires_at })),
  };
}
