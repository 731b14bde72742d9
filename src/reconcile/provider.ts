import type { ProviderName } from '../domain/providers.js';
import { fromRow, type ChargeRow, type LedgerCharge } from '../ledger/charges.js';
import type { LedgerPool } from '../ledger/pool.js';
import { recordProviderVoided } from '../ledger/provider-charges.js';
import { providerIdempotencyKey, type PaymentConnector, type ProviderPayment } from '../providers/connector.js';
import type { ReconcileCheck } from './check.js';
import { reconcileDefaults } from './reconcile.js';

/**
 * Reconciliation with a payment provider (docs/providers.md, Reconciliation): the provider's
 * payments carrying our reference, created within a window, against the ledger's provider charges.
 * Read-only unless asked to void orphan authorizations. What it checks:
 *
 * - every payment with our reference has its charge row (a payment without one is reported, never
 *   voided: it may be another environment's that shares the provider account);
 * - a charge has one payment, and it is the one the ledger recorded;
 * - every CONFIRMED charge has exactly one captured payment of the amount and currency the ledger
 *   captured, and every captured payment belongs to a CONFIRMED charge;
 * - no payment is for, can capture, or received more than its charge allows (a capture above the
 *   charge, or a duplicate's receipts, are money outside the ledger);
 * - no payment is held (or waiting for the payer) unless its charge is still TRIED before its
 *   payer-action deadline (a manual charge's hold expiry; an automatic charge's creation plus the
 *   hold TTL, as its workflow waits);
 * - every provider refund the ledger recorded exists at the provider with the refund's amount.
 */

/** Two days: longer than any charge stays open by default (HOLD_TTL_MS is 7 days for manual captures, but those are rare). */
export const providerReconcileWindowHoursDefault = 48;
const hourMs = 60 * 60 * 1000;
/**
 * The longest window, in hours: the connector's longest authorization (PaymentConnector,
 * longestAuthorizationMs; Stripe's is 720 h), past which no held payment can still be open, and a
 * bound on the listing, which reads every payment of the account in the window.
 */
export function providerReconcileWindowHoursMax(connector: Pick<PaymentConnector, 'longestAuthorizationMs'>): number {
  return Math.ceil(connector.longestAuthorizationMs / hourMs);
}

export interface ProviderReconcileOptions {
  ledger: LedgerPool;
  connector: PaymentConnector;
  /** One tenant, or every tenant when omitted. */
  tenant?: string | null;
  windowHours?: number;
  /** Void each orphan authorization of a cancelled or declined charge (and record the void). */
  voidOrphans?: boolean;
  /** How long after a charge's last change, or its hold's expiry, a held payment is still left to the workflow. */
  graceMs?: number;
  /**
   * The workers' hold TTL (HOLD_TTL_MS): an automatic charge records no hold expiry, and its payer
   * may act (3-D Secure) until its creation plus this, the deadline its workflow waits for.
   */
  holdTtlMs?: number;
  /** The reconciliation's clock (tests run it in the future instead of waiting). */
  nowMs?: number;
}

export interface OrphanVoid {
  tenant: string;
  chargeId: string;
  paymentId: string;
  /** A second payment of the charge (not the one the ledger recorded), voided with a key of its own. */
  duplicate: boolean;
  outcome: 'voided' | 'already_voided' | 'refused' | 'unknown';
  /** The void was recorded on the charge (a cancelled charge's one payment). */
  recorded: boolean;
  detail: string | null;
}

export interface ProviderReconcileReport {
  ok: boolean;
  provider: string;
  tenant: string | null;
  window: { from: string; to: string; hours: number };
  startedAt: string;
  durationMs: number;
  counts: {
    /** Payments with our reference in the window (of the tenant, when one is named). */
    payments: number;
    /** Payments the provider listed in the window, ours or not. */
    scanned: number;
    /** Provider charges compared: created in the window, or named by a payment in it. */
    charges: number;
    /** Provider refunds recorded in the ledger and looked up at the provider. */
    refunds: number;
  };
  checks: ReconcileCheck[];
  violations: number;
  /** What --void-orphans did (empty without it). */
  voided: OrphanVoid[];
}

const sampleLimit = 5;
/** HOLD_TTL_MS's default: how long an automatic charge's payer may take when no TTL is given. */
export const providerReconcileHoldTtlMsDefault = 7 * 24 * 60 * 60 * 1000;
/** Subtracted from the window's start when listing, for clocks that disagree (as findByReference does). */
const providerClockSkewMs = 5 * 60 * 1000;

export function assertWindowHours(hours: number, maxHours: number, field = '--window-hours'): number {
  if (!Number.isSafeInteger(hours) || hours < 1 || hours > maxHours) {
    throw new RangeError(`${field} must be a whole number of hours from 1 to ${maxHours}`);
  }
  return hours;
}

class Check {
  violations = 0;
  readonly samples: unknown[] = [];
  constructor(
    readonly name: string,
    readonly description: string,
  ) {}

  note(sample: unknown): void {
    this.violations += 1;
    if (this.samples.length < sampleLimit) this.samples.push(sample);
  }

  result(): ReconcileCheck {
    return { name: this.name, description: this.description, violations: this.violations, samples: this.samples };
  }
}

interface RecordedRefund {
  tenant: string;
  charge_key: string;
  id: string;
  charge_id: string;
  amount_minor: number;
  provider_refund_id: string;
}

export async function reconcileProvider(options: ProviderReconcileOptions): Promise<ProviderReconcileReport> {
  const started = Date.now();
  const nowMs = options.nowMs ?? started;
  const tenant = options.tenant ?? null;
  const hours = assertWindowHours(options.windowHours ?? providerReconcileWindowHoursDefault, providerReconcileWindowHoursMax(options.connector));
  const graceMs = options.graceMs ?? reconcileDefaults.holdGraceMs;
  const holdTtlMs = options.holdTtlMs ?? providerReconcileHoldTtlMsDefault;
  const provider = options.connector.provider as ProviderName;
  const fromMs = nowMs - hours * hourMs;

  // A payment is created after its charge (Try comes first), so the window's charges have their
  // payments in the listing from the window's start, less what clocks may disagree by.
  const listed = await options.connector.listByWindow({ createdFromMs: fromMs - providerClockSkewMs, createdToMs: nowMs });
  if (listed.outcome !== 'listed') {
    throw new Error(`listing ${provider}'s payments failed (${listed.outcome}: ${listed.reason}): ${listed.detail}; nothing was compared`);
  }
  const payments = listed.payments.filter((p) => p.reference !== null && (tenant === null || p.reference.tenant === tenant));
  const paymentsByCharge = new Map<string, ProviderPayment[]>();
  for (const payment of payments) {
    const list = paymentsByCharge.get(payment.reference!.chargeId) ?? [];
    list.push(payment);
    paymentsByCharge.set(payment.reference!.chargeId, list);
  }

  const { rows } = await options.ledger.query<ChargeRow>(
    `SELECT * FROM charges
      WHERE provider = $1 AND ($2::text IS NULL OR tenant = $2)
        AND (created_at >= $3 OR id = ANY($4::text[]))`,
    [provider, tenant, new Date(fromMs), [...paymentsByCharge.keys()]],
  );
  const charges = new Map(rows.map((row) => [row.id, fromRow(row)]));
  const inWindow = (charge: LedgerCharge): boolean => Date.parse(charge.charge.createdAt) >= fromMs;

  const haveCharges = new Check('provider_payments_have_charges', `every ${provider} payment carrying our reference has its charge row in the ledger`);
  const onePayment = new Check('provider_one_payment_per_charge', `no charge has two ${provider} payments, and the one the ledger recorded is the charge's`);
  const captures = new Check(
    'provider_captures_match_ledger',
    `every CONFIRMED provider charge has exactly one captured ${provider} payment of the captured amount and currency, and every captured payment belongs to a CONFIRMED charge`,
  );
  const amounts = new Check(
    'provider_amounts_within_charge',
    `no ${provider} payment is for more than its charge, can capture more than it, or received more than the ledger captured from it (nothing, for a payment the ledger did not capture)`,
  );
  const orphans = new Check(
    'provider_no_orphan_authorizations',
    `no ${provider} payment is held or waiting for the payer unless its charge is still TRIED within its hold: a manual charge's recorded expiry, an automatic charge's creation plus the hold TTL (${holdTtlMs} ms), the deadline its payer has (${graceMs} ms of grace after a change or the deadline)`,
  );
  const refunds = new Check('provider_refunds_agree', `every provider refund the ledger recorded exists at ${provider} with the refund's amount`);
  const toVoid: OrphanToVoid[] = [];

  for (const payment of payments) {
    const reference = payment.reference!;
    const charge = charges.get(reference.chargeId);
    if (!charge || charge.charge.tenant !== reference.tenant) {
      haveCharges.note({ paymentId: payment.id, tenant: reference.tenant, chargeId: reference.chargeId, status: payment.providerStatus });
      continue;
    }
    if (payment.state === 'captured' && charge.holdState !== 'CONFIRMED') {
      captures.note({ paymentId: payment.id, chargeId: reference.chargeId, problem: `captured ${payment.amountCapturedMinor} at the provider; the ledger's hold is ${charge.holdState}` });
    }
    const recorded = charge.charge.provider?.paymentId ?? null;
    const amountProblem = amountBeyondCharge(payment, charge, recorded);
    if (amountProblem !== null) amounts.note({ paymentId: payment.id, chargeId: reference.chargeId, tenant: reference.tenant, problem: amountProblem });
    if (payment.state === 'authorized' || payment.state === 'requires_action') {
      const openHold = charge.holdState === 'TRIED' && nowMs <= payerDeadlineMs(charge, holdTtlMs) + graceMs;
      // A decision just made: the workflow's compensation may be voiding this payment right now.
      const justDecided = nowMs - Date.parse(charge.charge.updatedAt) < graceMs;
      if (!openHold && !justDecided) {
        const duplicate = recorded !== null && payment.id !== recorded;
        orphans.note({ paymentId: payment.id, chargeId: reference.chargeId, tenant: reference.tenant, holdState: charge.holdState, status: payment.providerStatus, ...(duplicate ? { duplicateOf: recorded } : {}) });
        // Decided charges only: a TRIED charge's workflow may still record this payment as its own.
        // A succeeded charge's payment is the one the ledger recorded and captured; any other is a
        // duplicate that holds the payer's money for nothing.
        const decided = charge.holdState === 'CANCELLED' || charge.holdState === 'DECLINED' || (charge.holdState === 'CONFIRMED' && duplicate);
        if (decided) toVoid.push({ charge, payment, duplicate });
      }
    }
  }

  for (const [chargeId, found] of paymentsByCharge) {
    if (found.length > 1) onePayment.note({ chargeId, problem: `${found.length} payments`, payments: found.map((p) => `${p.id} (${p.providerStatus})`) });
  }

  for (const charge of charges.values()) {
    if (!inWindow(charge)) continue;
    const found = paymentsByCharge.get(charge.charge.id) ?? [];
    const recorded = charge.charge.provider?.paymentId ?? null;
    if (recorded !== null && !found.some((p) => p.id === recorded)) {
      onePayment.note({ chargeId: charge.charge.id, problem: `the ledger records ${recorded}, the provider lists ${found.map((p) => p.id).join(', ') || 'none'}` });
    }
    if (charge.holdState === 'CONFIRMED') {
      const captured = found.filter((p) => p.state === 'captured');
      const matching = captured.filter((p) => p.amountCapturedMinor === charge.charge.amountCapturedMinor && p.currency === charge.charge.currency);
      if (captured.length !== 1 || matching.length !== 1) {
        captures.note({
          chargeId: charge.charge.id,
          problem: `the ledger captured ${charge.charge.amountCapturedMinor} ${charge.charge.currency}; the provider: ${captured.map((p) => `${p.id} ${p.amountCapturedMinor} ${p.currency}`).join(', ') || 'no captured payment'}`,
        });
      }
    }
  }

  const recordedRefunds = await options.ledger.query<RecordedRefund>(
    `SELECT r.tenant, r.charge_key, r.id, r.charge_id, r.amount_minor, r.provider_refund_id
       FROM refunds r
      WHERE r.provider_refund_id IS NOT NULL AND r.charge_id = ANY($1::text[])
      ORDER BY r.created_at`,
    [[...charges.keys()]],
  );
  for (const refund of recordedRefunds.rows) {
    const paymentId = charges.get(refund.charge_id)?.charge.provider?.paymentId ?? null;
    if (paymentId === null) {
      refunds.note({ refundId: refund.id, chargeId: refund.charge_id, problem: 'the charge records no payment to refund' });
      continue;
    }
    const found = await options.connector.findRefund({ paymentId, refundId: refund.id });
    if (found.outcome === 'unknown') {
      throw new Error(`looking up refund ${refund.id} of ${paymentId} failed (${found.reason}): ${found.detail}; rerun reconcile`);
    }
    const amountMinor = Number(refund.amount_minor);
    if (found.outcome === 'found' && found.refund.id === refund.provider_refund_id && found.refund.amountMinor === amountMinor) continue;
    const providerSide =
      found.outcome === 'found'
        ? `the provider has ${found.refund.id} of ${found.refund.amountMinor}`
        : found.outcome === 'not_found'
          ? 'the provider has no refund carrying this refund id'
          : `the provider refused the lookup (${found.reason}: ${found.detail})`;
    refunds.note({ refundId: refund.id, chargeId: refund.charge_id, problem: `the ledger recorded ${refund.provider_refund_id} of ${amountMinor}; ${providerSide}` });
  }

  const voided = options.voidOrphans ? await voidOrphans(options.ledger, options.connector, toVoid) : [];
  const checks = [haveCharges, onePayment, captures, amounts, orphans, refunds].map((check) => check.result());
  const violations = checks.reduce((sum, check) => sum + check.violations, 0);
  return {
    ok: violations === 0,
    provider,
    tenant,
    window: { from: new Date(fromMs).toISOString(), to: new Date(nowMs).toISOString(), hours },
    startedAt: new Date(started).toISOString(),
    durationMs: Date.now() - started,
    counts: { payments: payments.length, scanned: listed.scanned, charges: charges.size, refunds: recordedRefunds.rows.length },
    checks,
    violations,
    voided,
  };
}

interface OrphanToVoid {
  charge: LedgerCharge;
  payment: ProviderPayment;
  duplicate: boolean;
}

/**
 * When an open charge's payer-action deadline passes: a manual charge's recorded hold expiry, else
 * (an automatic charge records none) its creation plus the hold TTL, as its workflow computes it.
 */
function payerDeadlineMs(charge: LedgerCharge, holdTtlMs: number): number {
  const recorded = charge.charge.holdExpiresAt === null ? Number.NaN : Date.parse(charge.charge.holdExpiresAt);
  return Number.isFinite(recorded) ? recorded : Date.parse(charge.charge.createdAt) + holdTtlMs;
}

/** Why a payment's amounts go beyond what its charge allows, or null. */
function amountBeyondCharge(payment: ProviderPayment, charge: LedgerCharge, recorded: string | null): string | null {
  const c = charge.charge;
  // Only the payment the ledger recorded for a confirmed charge may have received money, and no
  // more than the ledger captured; any other payment's receipts are money outside the ledger.
  const capturedByLedger = charge.holdState === 'CONFIRMED' && payment.id === recorded ? c.amountCapturedMinor : 0;
  if (payment.amountCapturedMinor > capturedByLedger) {
    return `received ${payment.amountCapturedMinor} ${payment.currency} at the provider; the ledger captured ${capturedByLedger} ${c.currency} from it (the charge is ${c.amountMinor})`;
  }
  if (payment.amountMinor > c.amountMinor) return `for ${payment.amountMinor} ${payment.currency} at the provider; the charge is ${c.amountMinor} ${c.currency}`;
  if (payment.amountCapturableMinor > c.amountMinor) {
    return `${payment.amountCapturableMinor} ${payment.currency} capturable at the provider; the charge is ${c.amountMinor} ${c.currency}`;
  }
  return null;
}

/**
 * The key a reconcile void of a duplicate payment is sent with: its own, derived from the payment's
 * id (the charge's void key belongs to the charge's one payment; reused for another, the provider
 * would replay that void or refuse the key), so a rerun replays instead of acting again.
 */
export function duplicateVoidKey(paymentId: string): string {
  return `${paymentId}:void`;
}

/**
 * Voids each orphan: the charge's own payment with its charge's void key (a void the workflow
 * already sent replays instead of acting again), a duplicate with a key derived from its id; and
 * records the void on a cancelled charge whose one payment it is. One at a time: a handful per
 * run, and the provider's rate limit is shared with live charges.
 */
async function voidOrphans(ledger: LedgerPool, connector: PaymentConnector, orphans: OrphanToVoid[]): Promise<OrphanVoid[]> {
  const done: OrphanVoid[] = [];
  for (const { charge, payment, duplicate } of orphans) {
    const { tenant, idempotencyKey, id: chargeId } = charge.charge;
    // Never the payment the ledger recorded for a succeeded charge: it is the captured one.
    if (charge.holdState === 'CONFIRMED' && !duplicate) continue;
    const idempotencyKey_ = duplicate ? duplicateVoidKey(payment.id) : providerIdempotencyKey(chargeId, 'void');
    const result = await connector.void({ paymentId: payment.id, idempotencyKey: idempotencyKey_ });
    const base = { tenant, chargeId, paymentId: payment.id, duplicate };
    if (result.outcome === 'voided' || result.outcome === 'already_voided') {
      const recordedId = charge.charge.provider?.paymentId ?? null;
      const record = !duplicate && charge.holdState === 'CANCELLED' && (recordedId === null || recordedId === payment.id);
      if (record) await recordProviderVoided(ledger, tenant, idempotencyKey, payment.id);
      done.push({ ...base, outcome: result.outcome, recorded: record, detail: null });
    } else if (result.outcome === 'rejected') {
      done.push({ ...base, outcome: 'refused', recorded: false, detail: `${result.reason}${result.code ? ` (${result.code})` : ''}: ${result.detail}` });
    } else {
      done.push({ ...base, outcome: 'unknown', recorded: false, detail: `${result.reason}: ${result.detail}; rerun to void it` });
    }
  }
  return done;
}

/** What a provider reconcile exits with: 0 when every check holds, 1 otherwise (voiding does not change what was found). */
export function providerReconcileExitCode(report: ProviderReconcileReport): number {
  return report.ok ? 0 : 1;
}

const number = new Intl.NumberFormat('en-US');

/** The provider reconcile's report for a person, in the ledger reconcile's format. */
export function formatProviderReconcileReport(report: ProviderReconcileReport): string {
  const failed = report.checks.filter((check) => check.violations > 0);
  const lines = [
    `reconcile ${report.provider} ${report.ok ? 'OK' : 'FAILED'} · ${report.tenant ? `tenant ${report.tenant}` : 'all tenants'} · ` +
      `${report.startedAt} · ${number.format(report.durationMs)} ms`,
    `  window     ${report.window.hours} h, payments created from ${report.window.from} to ${report.window.to}`,
    `  payments   ${number.format(report.counts.payments)} with our reference (${number.format(report.counts.scanned)} listed)`,
    `  charges    ${number.format(report.counts.charges)} provider charges compared`,
    `  refunds    ${number.format(report.counts.refunds)} provider refunds looked up`,
    `  checks     ${report.checks.length - failed.length} passed, ${failed.length} failed`,
  ];
  for (const check of report.checks) {
    const detail =
      check.violations > 0
        ? ` (${check.description}): ${number.format(check.violations)} violation(s), e.g. ${JSON.stringify(check.samples[0])}`
        : '';
    lines.push(`    ${check.violations > 0 ? '✗' : '✓'} ${check.name}${detail}`);
  }
  for (const v of report.voided) {
    const what = v.outcome === 'voided' || v.outcome === 'already_voided' ? `${v.outcome}${v.recorded ? ', recorded on the charge' : ''}` : `NOT voided, ${v.outcome}: ${v.detail}`;
    lines.push(`  void       ${v.paymentId} ${v.duplicate ? '(a duplicate) ' : ''}of charge ${v.chargeId} (tenant ${v.tenant}): ${what}`);
  }
  return lines.join('\n');
}
