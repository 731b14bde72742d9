import type { Charge, ChargeIntent, DeclineCode, HoldState, CaptureMode } from '../domain/charge.js';
import { statusOfHold } from '../domain/charge.js';
import type { ChargeProviderPayment, ProviderName, ProviderPaymentState } from '../domain/providers.js';
import type { LedgerPool } from './pool.js';
import { classifyLedgerError } from './errors.js';
import { stepBatcher, type StepRunner } from './step-batches.js';

/** A row of the charges table, as the ledger functions return it. */
export interface ChargeRow {
  tenant: string;
  idempotency_key: string;
  id: string;
  fingerprint: string;
  order_id: string;
  payer_account_id: string;
  payee_account_id: string;
  currency: string;
  amount_minor: number;
  capture_mode: CaptureMode;
  description: string | null;
  metadata: Record<string, string> | null;
  hold_state: HoldState;
  held_minor: number;
  captured_minor: number;
  refunded_minor: number;
  decline_code: DeclineCode | null;
  failure_reason: string | null;
  /** The API key that created the charge (null: the operator, or a row from before keys were recorded); optional for rows read before the column existed. */
  created_by_key_id?: string | null;
  hold_expires_at: Date | null;
  created_at: Date;
  updated_at: Date;
  /** Provider charges (migration 160); optional for rows read before the columns existed. */
  provider?: string | null;
  payment_method?: string | null;
  provider_payment_id?: string | null;
  provider_state?: ProviderPaymentState | null;
  provider_next_action?: unknown;
  provider_decline_code?: string | null;
  provider_authorize_sent_at?: Date | null;
  provider_capture_sent_at?: Date | null;
}

/** The ledger's view of a charge, with the hold state the truth table speaks of. */
export interface LedgerCharge {
  holdState: HoldState;
  fingerprint: string;
  charge: Charge;
  /** A provider charge's send times (the provider's key retention is counted from them); absent otherwise. */
  providerSentAt?: { authorizeMs: number | null; captureMs: number | null };
}

export function fromRow(row: ChargeRow): LedgerCharge {
  return {
    holdState: row.hold_state,
    fingerprint: row.fingerprint,
    ...(row.provider
      ? {
          providerSentAt: {
            authorizeMs: row.provider_authorize_sent_at?.getTime() ?? null,
            captureMs: row.provider_capture_sent_at?.getTime() ?? null,
          },
        }
      : {}),
    charge: {
      id: row.id,
      tenant: row.tenant,
      idempotencyKey: row.idempotency_key,
      status: statusOfHold(row.hold_state, row.captured_minor, row.refunded_minor, row.provider_state ?? null),
      amountMinor: row.amount_minor,
      amountCapturedMinor: row.captured_minor,
      amountRefundedMinor: row.refunded_minor,
      amountHeldMinor: row.held_minor,
      currency: row.currency,
      orderId: row.order_id,
      payerAccountId: row.payer_account_id,
      payeeAccountId: row.payee_account_id,
      captureMode: row.capture_mode,
      description: row.description,
      metadata: row.metadata,
      declineCode: row.decline_code,
      failureReason: row.failure_reason,
      ...(row.created_by_key_id !== undefined ? { createdByKeyId: row.created_by_key_id } : {}),
      holdExpiresAt: row.hold_expires_at?.toISOString() ?? null,
      createdAt: row.created_at.toISOString(),
      updatedAt: row.updated_at.toISOString(),
      ...(row.provider ? { provider: providerPaymentOf(row) } : {}),
    },
  };
}

function providerPaymentOf(row: ChargeRow): ChargeProviderPayment {
  return {
    provider: row.provider as ProviderName,
    paymentMethod: row.payment_method ?? '',
    paymentId: row.provider_payment_id ?? null,
    state: row.provider_state ?? null,
    nextAction: row.provider_next_action ?? null,
    declineCode: row.provider_decline_code ?? null,
  };
}

export function intentParams(intent: ChargeIntent): unknown[] {
  const r = intent.request;
  return [
    intent.tenant, intent.idempotencyKey, intent.chargeId, intent.fingerprint,
    r.orderId, r.payerAccountId, r.payeeAccountId, r.currency, r.amountMinor,
    r.captureMode, r.description, r.metadata === null ? null : JSON.stringify(r.metadata),
  ];
}

/** A ledger function call as a named prepared statement: parsed and planned once per connection. */
export interface LedgerStatement {
  name: string;
  text: string;
}

/**
 * The steps run as named prepared statements: PostgreSQL parses and plans each once per connection
 * instead of on every call (+22% Try+Confirm pairs/s, bench/experiments/ledger-variants.ts). A
 * migration that changes the charges row and re-creates the step functions invalidates a connection's plan for good ("cached plan
 * must not change result type", SQLSTATE 0A000, raised before anything runs); that connection is
 * then dropped and the call runs once more on a fresh one.
 */
export async function callLedgerFunction(pool: LedgerPool, statement: LedgerStatement, values: unknown[]): Promise<LedgerCharge> {
  const row = (await queryLedgerStatement(pool, statement, values))[0];
  if (!row) throw new Error(`ledger function returned no row: ${statement.text}`);
  return fromRow(row);
}

async function queryLedgerStatement(pool: LedgerPool, statement: LedgerStatement, values: unknown[]): Promise<ChargeRow[]> {
  for (let attempt = 1; ; attempt++) {
    const client = await pool.connect();
    let stalePlan: Error | undefined;
    try {
      return (await client.query<ChargeRow>({ ...statement, values })).rows;
    } catch (error) {
      if (isStalePlan(error)) stalePlan = error as Error;
      if (stalePlan && attempt === 1) continue;
      throw classifyLedgerError(error);
    } finally {
      client.release(stalePlan);
    }
  }
}

function isStalePlan(error: unknown): boolean {
  const { code, message } = error as { code?: unknown; message?: unknown };
  return code === '0A000' && typeof message === 'string' && message.includes('cached plan must not change result type');
}

const statements = {
  try: { name: 'ledger_try', text: 'SELECT * FROM ledger_try($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)' },
  confirm: { name: 'ledger_confirm', text: 'SELECT * FROM ledger_confirm($1, $2, $3)' },
  cancel: { name: 'ledger_cancel', text: 'SELECT * FROM ledger_cancel($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)' },
  tryBatch: {
    name: 'ledger_try_batch',
    text: 'SELECT * FROM ledger_try_batch($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)',
  },
  confirmBatch: { name: 'ledger_confirm_batch', text: 'SELECT * FROM ledger_confirm_batch($1, $2, $3)' },
} as const satisfies Record<string, LedgerStatement>;

const rowKey = (tenant: string, idempotencyKey: string): string => `${tenant}\u0000${idempotencyKey}`;

/** Column-wise: the batch functions take one array per parameter. */
function transpose(rows: unknown[][]): unknown[][] {
  return rows[0]!.map((_, column) => rows.map((row) => row[column]));
}

async function runBatch(pool: LedgerPool, statement: LedgerStatement, items: unknown[][]): Promise<Map<string, LedgerCharge>> {
  const rows = await queryLedgerStatement(pool, statement, transpose(items));
  return new Map(rows.map((row) => [rowKey(row.tenant, row.idempotency_key), fromRow(row)]));
}

/** Try's parameters, in ledger_try's order. */
type TryParams = unknown[];

const tryRunner = (pool: LedgerPool): StepRunner<TryParams, LedgerCharge> => ({
  keyOf: (params) => rowKey(params[0] as string, params[1] as string),
  // A key with a daily limit takes an advisory lock per key inside Try; in a batch, two keys' locks
  // and the payers' rows could be taken in opposite orders by two batches. Such Trys run alone.
  // The intent's dailyLimitMinor only chooses the path here: the ledger reads the limit from the
  // key's row. An intent that hides its key's limit gets batched, and the worst it can cause is a
  // deadlock PostgreSQL breaks, after which each item of the batch runs alone.
  mayBatch: (params) => params[14] === null,
  runOne: (params) => callLedgerFunction(pool, statements.try, params),
  runMany: (items) => runBatch(pool, statements.tryBatch, items),
});

/** Confirm's parameters: tenant, key, capture. */
type ConfirmParams = [string, string, number | null];

const confirmRunner = (pool: LedgerPool): StepRunner<ConfirmParams, LedgerCharge> => ({
  keyOf: ([tenant, key]) => rowKey(tenant, key),
  mayBatch: () => true,
  runOne: (params) => callLedgerFunction(pool, statements.confirm, params),
  runMany: (items) => runBatch(pool, statements.confirmBatch, items),
});

/**
 * Try: reserve the amount on the payer, or record the decline. One transaction, idempotent. The
 * acting key is recorded on the charge; whether it may charge, and its mandate (largest charge,
 * payees, currency, expiry, daily limit), are read by ledger_try from the key's own row, never
 * from the intent (docs/back-door.md). `intent.dailyLimitMinor` is passed on only as a batching
 * hint and is ignored by the ledger.
 */
export function tryHold(pool: LedgerPool, intent: ChargeIntent, holdTtlMs: number): Promise<LedgerCharge> {
  return stepBatcher(pool, 'try', tryRunner(pool)).submit([
    ...intentParams(intent),
    holdTtlMs,
    intent.actingKeyId ?? null,
    intent.dailyLimitMinor ?? null,
  ]);
}

/** Confirm: capture the hold (all of it, or `captureMinor` of it, releasing the rest). */
export function confirmHold(
  pool: LedgerPool,
  tenant: string,
  idempotencyKey: string,
  captureMinor: number | null,
): Promise<LedgerCharge> {
  return stepBatcher(pool, 'confirm', confirmRunner(pool)).submit([tenant, idempotencyKey, captureMinor]);
}

/** Cancel: release the hold, or leave a tombstone when no Try has run yet. */
export function cancelHold(pool: LedgerPool, intent: ChargeIntent, reason: string): Promise<LedgerCharge> {
  return callLedgerFunction(pool, statements.cancel, [...intentParams(intent), reason]);
}

export async function readCharge(pool: LedgerPool, tenant: string, idempotencyKey: string): Promise<LedgerCharge | null> {
  const result = await pool
    .query<ChargeRow>('SELECT * FROM charges WHERE tenant = $1 AND idempotency_key = $2', [tenant, idempotencyKey])
    .catch((error: unknown) => {
      throw classifyLedgerError(error);
    });
  const row = result.rows[0];
  return row ? fromRow(row) : null;
}

/**
 * What the key's charges other than `excludingChargeId` hold or captured, created in the last 24 h:
 * the rolling total its daily limit bounds, summed exactly as ledger_try sums it (the same
 * predicate, the same clock: the database's now()), on the same index (charges_created_by_key_recent).
 * Read by the service before a charge starts; ledger_try's own sum, under its per-key lock, stays
 * the judge for charges that race each other.
 */
export async function keyDailyTotalMinor(pool: LedgerPool, keyId: string, excludingChargeId: string): Promise<number> {
  const result = await pool
    .query<{ total_minor: string }>({
      name: 'chargeguard_key_daily_total',
      text: `SELECT coalesce(sum(c.held_minor + c.captured_minor), 0) AS total_minor FROM charges c
              WHERE c.created_by_key_id = $1 AND c.created_at > now() - interval '24 hours' AND c.id <> $2`,
      values: [keyId, excludingChargeId],
    })
    .catch((error: unknown) => {
      throw classifyLedgerError(error);
    });
  return Number(result.rows[0]?.total_minor ?? 0);
}

/** The rows of the given keys (those the ledger has), in one query. */
export async function readChargesByKeys(
  pool: LedgerPool,
  keys: readonly { tenant: string; idempotencyKey: string }[],
): Promise<LedgerCharge[]> {
  if (keys.length === 0) return [];
  const result = await pool.query<ChargeRow>(
    `SELECT c.* FROM charges c
       JOIN unnest($1::text[], $2::text[]) AS k (tenant, idempotency_key)
         ON c.tenant = k.tenant AND c.idempotency_key = k.idempotency_key`,
    [keys.map((k) => k.tenant), keys.map((k) => k.idempotencyKey)],
  );
  return result.rows.map(fromRow);
}
