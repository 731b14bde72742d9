import { WorkflowNotFoundError, type Client, type WorkflowExecutionInfo } from '@temporalio/client';
import { chargeWorkflowId, type Charge, type ChargeStatus, type HoldState } from '../domain/charge.js';
import { readChargesByKeys, type LedgerCharge } from '../ledger/charges.js';
import { countExpiredHolds, listHeldCharges, type HeldChargeKey } from '../ledger/holds.js';
import { CheckTimeoutError, inSnapshot, isStatementTimeout, ledgerInvariantChecks, runBatchedCheck } from '../ledger/invariants.js';
import { keysetBatchRowsDefault, type Queryable } from '../ledger/keyset.js';
import type { LedgerPool } from '../ledger/pool.js';
import { countLedger, type LedgerCounts } from '../ledger/reports.js';
import { chargeWorkflowType } from '../../workflows/definitions.js';
import { checkAuthority } from './authority.js';
import type { ReconcileCheck } from './check.js';

/**
 * Reconciliation: the ledger invariants of docs/contract.md, checked across the ledger and Temporal.
 * Read-only, safe to run against a live system at any time. Every closed ChargeWorkflow that
 * Temporal's visibility still lists and every open hold is checked, not a recent window: both are
 * read page by page, so memory stays bounded by the page size however large the history is.
 */
export interface ReconcileOptions {
  ledger: LedgerPool;
  /** Without it only the ledger is checked, and the workflow checks are reported as skipped. */
  temporal?: Client | null;
  /** One tenant, or every tenant when omitted. */
  tenant?: string | null;
  /** How long past its expiry a TRIED hold may still wait for its workflow's timer to void it. */
  holdGraceMs?: number;
  /** Closed executions (a visibility page) and open holds (a ledger page) held in memory at once. */
  pageSize?: number;
  /** Temporal calls in flight at once. */
  concurrency?: number;
  /**
   * How long any one of reconcile's ledger statements may run (each is one keyset batch of a
   * check, so this bounds a batch, not the whole run); past it reconcile stops with an error naming
   * the check. Its own limit, not the service's statement_timeout (10 s by default).
   */
  reconcileStatementTimeoutMs?: number;
  /** Driving rows per statement of the ledger checks (src/ledger/keyset.ts). */
  batchRows?: number;
}

type ReconcileSettings = Required<Pick<ReconcileOptions, 'holdGraceMs' | 'pageSize' | 'concurrency' | 'reconcileStatementTimeoutMs' | 'batchRows'>>;

/** The largest reconcileStatementTimeoutMs: an hour for one batch is a sign of something else wrong. */
export const reconcileStatementTimeoutMsMax = 3_600_000;

export const reconcileDefaults: Readonly<ReconcileSettings> = {
  holdGraceMs: 60_000,
  pageSize: 100,
  concurrency: 8,
  // A batch reads batchRows driving rows and a few index lookups each: well under a second on a
  // quiet machine (bench/experiments/reconcile-large-ledger.ts); a minute leaves room for a loaded
  // one, or a database just back from a crash with a cold cache.
  reconcileStatementTimeoutMs: 60_000,
  batchRows: keysetBatchRowsDefault,
};

/**
 * Reconcile did not finish: one statement of a check ran past reconcileStatementTimeoutMs. Nothing
 * was found wrong by that check; the message names it and the limit to raise.
 */
export class ReconcileTimeoutError extends Error {
  constructor(
    readonly check: string,
    readonly reconcileStatementTimeoutMs: number,
    cause: unknown,
  ) {
    super(
      `reconcile did not finish: check ${check} ran past reconcileStatementTimeoutMs (${reconcileStatementTimeoutMs} ms) on one statement ` +
        `(${(cause as Error).message}); raise it (reconcile --statement-timeout-ms) or run it when the database is less busy`,
      { cause },
    );
    this.name = 'ReconcileTimeoutError';
  }
}

export interface ReconcileCounts extends LedgerCounts {
  /** Closed ChargeWorkflow executions compared with their ledger rows: every one visibility lists. */
  workflowsExamined: number;
  workflowsMatched: number;
  /** Open (TRIED) holds whose workflow was asked whether it still runs: every one. */
  holdsExamined: number;
  /**
   * Audit: charges, refunds and deposits made by an API key (`byKey`, how many per key id), and
   * those with no key (the operator's command line, or made before keys were recorded).
   */
  audit: { byKey: Record<string, number>; withoutKey: number };
}

export interface ReconcileReport {
  ok: boolean;
  tenant: string | null;
  startedAt: string;
  durationMs: number;
  counts: ReconcileCounts;
  checks: ReconcileCheck[];
  /** Sum of the violations of every check. */
  violations: number;
}

const sampleLimit = 5;

export async function reconcile(options: ReconcileOptions): Promise<ReconcileReport> {
  const started = Date.now();
  const tenant = options.tenant ?? null;
  const settings: ReconcileSettings = { ...reconcileDefaults, ...definedOnly(options) };

  if (!Number.isSafeInteger(settings.reconcileStatementTimeoutMs) || settings.reconcileStatementTimeoutMs < 1 || settings.reconcileStatementTimeoutMs > reconcileStatementTimeoutMsMax) {
    throw new RangeError(`reconcileStatementTimeoutMs must be a whole number of ms from 1 to ${reconcileStatementTimeoutMsMax}`);
  }
  const limits = { statementTimeoutMs: settings.reconcileStatementTimeoutMs, batchRows: settings.batchRows };

  // Every ledger check in one repeatable-read snapshot, each statement under reconcile's own limit.
  const { ledgerChecks, authorityChecks, counts, expiredHolds } = await inSnapshot(options.ledger, limits, async (client) => {
    let current = 'ledger counts';
    try {
      const ledgerChecks: ReconcileCheck[] = [];
      for (const check of ledgerInvariantChecks) {
        current = check.name;
        ledgerChecks.push(await runBatchedCheck(client, check, tenant, limits));
      }
      // Who moved money and whether they could (src/reconcile/authority.ts).
      current = 'authority';
      const authorityChecks = await checkAuthority(client, tenant, limits);
      current = 'ledger counts';
      const counts = await countLedgerForReport(client, tenant);
      current = 'no_expired_holds';
      const expiredHolds = await checkExpiredHolds(client, tenant, settings.holdGraceMs);
      return { ledgerChecks, authorityChecks, counts, expiredHolds };
    } catch (error) {
      if (error instanceof CheckTimeoutError) throw new ReconcileTimeoutError(error.check, settings.reconcileStatementTimeoutMs, error.cause);
      if (isStatementTimeout(error)) throw new ReconcileTimeoutError(current, settings.reconcileStatementTimeoutMs, error);
      throw error;
    }
  });

  let workflowChecks: ReconcileCheck[];
  if (options.temporal) {
    const outcomes = await checkWorkflowOutcomes(options.temporal, options.ledger, tenant, settings);
    const holds = await checkHoldsHaveRunningWorkflows(options.temporal, options.ledger, tenant, settings);
    counts.workflowsExamined = outcomes.examined;
    counts.workflowsMatched = outcomes.examined - outcomes.check.violations;
    counts.holdsExamined = holds.examined;
    workflowChecks = [outcomes.check, holds.check];
  } else {
    const skipped = 'no Temporal client given';
    workflowChecks = [
      { ...workflowOutcomeCheck, violations: 0, samples: [], skipped },
      { ...heldWhileRunningCheck, violations: 0, samples: [], skipped },
    ];
  }

  const checks = [...ledgerChecks, ...authorityChecks, expiredHolds, ...workflowChecks];
  const violations = checks.reduce((sum, check) => sum + check.violations, 0);
  return {
    ok: violations === 0,
    tenant,
    startedAt: new Date(started).toISOString(),
    durationMs: Date.now() - started,
    counts,
    checks,
    violations,
  };
}

/** What a reconcile command exits with: 0 when every check holds, 1 otherwise. */
export function reconcileExitCode(report: ReconcileReport): number {
  return report.ok ? 0 : 1;
}

function definedOnly(options: ReconcileOptions): Partial<ReconcileSettings> {
  const picked: Partial<ReconcileSettings> = {};
  for (const key of Object.keys(reconcileDefaults) as (keyof ReconcileSettings)[]) {
    const value = options[key];
    if (value !== undefined) picked[key] = value;
  }
  return picked;
}

async function countLedgerForReport(pool: Queryable, tenant: string | null): Promise<ReconcileCounts> {
  const counts = await countLedger(pool, tenant);
  const audit = await countByKey(pool, tenant);
  return { ...counts, workflowsExamined: 0, workflowsMatched: 0, holdsExamined: 0, audit };
}

async function countByKey(pool: Queryable, tenant: string | null): Promise<ReconcileCounts['audit']> {
  const result = await pool.query<{ key_id: string | null; n: string }>(
    `SELECT key_id, count(*) AS n FROM (
       SELECT created_by_key_id AS key_id FROM charges WHERE $1::text IS NULL OR tenant = $1
       UNION ALL
       SELECT created_by_key_id FROM refunds WHERE $1::text IS NULL OR tenant = $1
       UNION ALL
       SELECT created_by_key_id FROM transfers WHERE kind = 'deposit' AND ($1::text IS NULL OR tenant = $1)
     ) moves GROUP BY key_id`,
    [tenant],
  );
  const audit: ReconcileCounts['audit'] = { byKey: {}, withoutKey: 0 };
  for (const row of result.rows) {
    if (row.key_id === null) audit.withoutKey = Number(row.n);
    else audit.byKey[row.key_id] = Number(row.n);
  }
  return audit;
}

async function checkExpiredHolds(pool: Queryable, tenant: string | null, graceMs: number): Promise<ReconcileCheck> {
  const started = performance.now();
  const expired = await countExpiredHolds(pool, { tenant, graceMs, sampleLimit });
  return {
    name: 'no_expired_holds',
    description: `no hold is still TRIED more than ${graceMs} ms after its expiry`,
    violations: expired.count,
    samples: expired.samples,
    durationMs: Math.round(performance.now() - started),
  };
}

const workflowOutcomeCheck = {
  name: 'workflow_outcome_matches_ledger',
  description: "every closed ChargeWorkflow's outcome matches its ledger row, and none left its hold open",
};

const heldWhileRunningCheck = {
  name: 'holds_have_running_workflows',
  description: 'every TRIED hold belongs to a ChargeWorkflow that is still running',
};

/** The hold state a completed workflow's result implies: refunds change the status, not the hold. */
function holdStateOf(status: ChargeStatus): HoldState | null {
  switch (status) {
    case 'succeeded':
    case 'partially_refunded':
    case 'refunded':
      return 'CONFIRMED';
    case 'declined':
      return 'DECLINED';
    case 'cancelled':
    case 'cancelling':
      return 'CANCELLED';
    case 'pending':
    case 'requires_action':
    case 'reserved':
      return null;
  }
}

/** Why a completed workflow's result and its ledger row disagree, or null when they agree. */
export function outcomeMismatch(result: Charge, row: LedgerCharge | undefined): string | null {
  if (!row) return 'the workflow completed but the ledger has no row for its key';
  const expected = holdStateOf(result.status);
  if (expected === null) return `the workflow completed while the charge was ${result.status}`;
  if (row.holdState !== expected) return `the workflow says ${result.status}, the ledger hold is ${row.holdState}`;
  if (row.charge.id !== result.id) return `the workflow names charge ${result.id}, the ledger ${row.charge.id}`;
  if (row.charge.amountCapturedMinor !== result.amountCapturedMinor) {
    return `the workflow captured ${result.amountCapturedMinor}, the ledger ${row.charge.amountCapturedMinor}`;
  }
  if (row.charge.declineCode !== result.declineCode) {
    return `the workflow declined with ${result.declineCode}, the ledger with ${row.charge.declineCode}`;
  }
  return null;
}

/** `charge/<tenant>/<key>`: tenants contain no '/', keys may. */
function parseChargeWorkflowId(workflowId: string): { tenant: string; key: string } | null {
  const match = /^charge\/([^/]+)\/(.+)$/s.exec(workflowId);
  return match ? { tenant: match[1]!, key: match[2]! } : null;
}

async function readCharges(
  pool: LedgerPool,
  keys: { tenant: string; key: string }[],
): Promise<Map<string, LedgerCharge>> {
  const rows = await readChargesByKeys(pool, keys.map((k) => ({ tenant: k.tenant, idempotencyKey: k.key })));
  return new Map(rows.map((row) => [chargeWorkflowId(row.charge.tenant, row.charge.idempotencyKey), row]));
}

/** Runs `work` over `items` with at most `limit` in flight. */
async function inBatches<T, R>(items: T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += limit) {
    results.push(...(await Promise.all(items.slice(i, i + limit).map(work))));
  }
  return results;
}

async function checkWorkflowOutcomes(
  temporal: Client,
  pool: LedgerPool,
  tenant: string | null,
  settings: ReconcileSettings,
): Promise<{ check: ReconcileCheck; examined: number }> {
  // Tenants match [a-z0-9_-], so interpolating one into the query cannot change its meaning.
  const query =
    `WorkflowType = '${chargeWorkflowType}' AND ExecutionStatus != 'Running'` +
    (tenant ? ` AND WorkflowId STARTS_WITH 'charge/${tenant}/'` : '');

  const samples: unknown[] = [];
  let violations = 0;
  let examined = 0;
  const note = (workflowId: string, status: string, problem: string) => {
    violations++;
    if (samples.length < sampleLimit) samples.push({ workflowId, status, problem });
  };

  /** Compares one page of closed executions with their ledger rows (one query for the page). */
  async function comparePage(page: WorkflowExecutionInfo[]): Promise<void> {
    const keyed = page.map((execution) => ({ execution, id: parseChargeWorkflowId(execution.workflowId) }));
    const rows = await readCharges(pool, keyed.flatMap(({ id }) => (id ? [id] : [])));
    await inBatches(keyed, settings.concurrency, async ({ execution, id }) => {
      const status = execution.status.name;
      if (!id) return note(execution.workflowId, status, 'the workflow id is not charge/<tenant>/<key>');
      const row = rows.get(execution.workflowId);
      if (status === 'COMPLETED') {
        const handle = temporal.workflow.getHandle(execution.workflowId, execution.runId, { followRuns: false });
        const problem = outcomeMismatch((await handle.result()) as Charge, row);
        if (problem) note(execution.workflowId, status, problem);
      } else if (row?.holdState === 'TRIED') {
        // Failed, terminated, timed out: no outcome to compare, but its hold must not outlive it.
        note(execution.workflowId, status, 'the workflow closed and its hold is still TRIED');
      }
    });
    examined += page.length;
  }

  // The SDK's iterator fetches the next visibility page only when this loop asks for it, so at
  // most one page of executions is held, compared, and let go.
  let page: WorkflowExecutionInfo[] = [];
  for await (const execution of temporal.workflow.list({ query, pageSize: settings.pageSize })) {
    page.push(execution);
    if (page.length >= settings.pageSize) {
      await comparePage(page);
      page = [];
    }
  }
  if (page.length > 0) await comparePage(page);
  return { check: { ...workflowOutcomeCheck, violations, samples }, examined };
}

async function checkHoldsHaveRunningWorkflows(
  temporal: Client,
  pool: LedgerPool,
  tenant: string | null,
  settings: ReconcileSettings,
): Promise<{ check: ReconcileCheck; examined: number }> {
  const samples: unknown[] = [];
  let violations = 0;
  let examined = 0;
  // Every open hold, a page at a time in a stable order (keyset, not OFFSET: holds settling while
  // this runs never make it skip one that is still held).
  let after: HeldChargeKey | null = null;
  for (;;) {
    const page = await listHeldCharges(pool, { minAgeMs: 0, after, limit: settings.pageSize, tenant });
    if (page.length === 0) break;
    await inBatches(page, settings.concurrency, async (held) => {
      const workflowId = chargeWorkflowId(held.tenant, held.idempotencyKey);
      let workflowStatus: string;
      try {
        workflowStatus = (await temporal.workflow.getHandle(workflowId).describe()).status.name;
      } catch (error) {
        if (!(error instanceof WorkflowNotFoundError)) throw error;
        workflowStatus = 'NOT_FOUND';
      }
      if (workflowStatus === 'RUNNING') return;
      // The workflow may have settled the hold between the two reads: only a hold that is still
      // TRIED after its workflow closed is an orphan.
      const again = await readCharges(pool, [{ tenant: held.tenant, key: held.idempotencyKey }]);
      const row = again.get(workflowId);
      if (row?.holdState !== 'TRIED') return;
      violations++;
      if (samples.length < sampleLimit) samples.push({ workflowId, workflowStatus, heldMinor: row.charge.amountHeldMinor });
    });
    examined += page.length;
    after = page[page.length - 1]!;
  }
  return { check: { ...heldWhileRunningCheck, violations, samples }, examined };
}
