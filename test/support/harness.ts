import { clearingAccountId } from '../../src/domain/providers.js';
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import type { DataConverter } from '@temporalio/common';
import { NativeConnection, Worker } from '@temporalio/worker';
import { afterAll, beforeAll, expect, inject } from 'vitest';
import type { LedgerActivityHooks, RefundActivityHooks } from '../../activities/index.js';
import { clientDataConverter } from '../../src/codec/data-converter.js';
import { payloadProtectionFromSettings, type PayloadProtection } from '../../src/codec/payload-protection.js';
import { ChargeService } from '../../src/service/charge-service.js';
import { chargeFingerprint, chargeIdFor } from '../../src/service/intent.js';
import type { ChargeIntent } from '../../src/domain/charge.js';
import { createAccount, deposit, getAccount, type Account } from '../../src/ledger/accounts.js';
import { checkLedgerInvariants } from '../../src/ledger/invariants.js';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { createLedgerPool, type LedgerPool } from '../../src/ledger/pool.js';
import { formatReconcileReport, reconcile } from '../../src/reconcile/index.js';
import { createChargeWorker, type ChargeWorkerOptions } from '../../src/worker/charge-worker.js';
import type { ChargePolicy } from '../../workflows/definitions.js';

/** Short budgets so fault tests finish quickly; still real timeouts on the real server. */
export const testPolicy: ChargePolicy = {
  activityStartToCloseMs: 5_000,
  tryBudgetMs: 60_000,
  confirmBudgetMs: 60_000,
  holdTtlMs: 60_000,
};

export interface Harness {
  temporal: Client;
  connection: Connection;
  pool: LedgerPool;
  client: ChargeService;
  clientFor(options: { taskQueue?: string; policy?: Partial<ChargePolicy>; temporal?: Client; eagerWorkflowStart?: boolean }): ChargeService;
  close(): Promise<void>;
}

/** The run's payload settings, as `start` prints them for other terminals: the stack's key file. */
export function testPayloadSettings(): { CHARGEGUARD_PAYLOAD_KEYS_FILE: string } {
  return { CHARGEGUARD_PAYLOAD_KEYS_FILE: inject('stack').payloadKeysFile };
}

/** The run's payload keys, plaintext refused: what the shared worker reads with. */
export function testPayloadProtection(): PayloadProtection {
  return payloadProtectionFromSettings(testPayloadSettings());
}

/**
 * The data converter every client a test builds must use: the shared worker refuses plaintext, so a
 * client without it would start charges that fail as undecodable.
 */
export function testDataConverter(): DataConverter {
  return clientDataConverter(testPayloadProtection());
}

export async function openHarness(): Promise<Harness> {
  const stack = inject('stack');
  const connection = await Connection.connect({ address: stack.temporalAddress });
  const temporal = new Client({ connection, namespace: 'default', dataConverter: testDataConverter() });
  const pool = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 10 });
  const clientFor: Harness['clientFor'] = (options) =>
    new ChargeService({
      temporal: options.temporal ?? temporal,
      ledger: pool,
      policy: { ...testPolicy, ...options.policy },
      amountMinorMax: 1_000_000_000_000,
      waitBudgetMs: 60_000,
      taskQueue: options.taskQueue,
      eagerWorkflowStart: options.eagerWorkflowStart,
    });
  return {
    temporal,
    connection,
    pool,
    client: clientFor({}),
    clientFor,
    close: async () => {
      await connection.close();
      await pool.end();
    },
  };
}

/**
 * Stands for an object a beforeAll hook opens: usable in tests and later hooks, an error when used
 * before the hook ran (at the top level of a test file, for instance).
 */
export function lateBound<T extends object>(what: string, current: () => T | undefined): T {
  const opened = (): T => {
    const value = current();
    if (value === undefined) throw new Error(`${what} is used before beforeAll opened it`);
    return value;
  };
  return new Proxy({} as T, {
    get: (_unopened, property) => {
      const value = opened();
      const member: unknown = Reflect.get(value, property, value);
      return typeof member === 'function' ? (member as (...args: unknown[]) => unknown).bind(value) : member;
    },
    has: (_unopened, property) => Reflect.has(opened(), property),
  });
}

/** The harness of one test file: opened before its tests, closed after them. */
export function useHarness(): Harness {
  let harness: Harness | undefined;
  beforeAll(async () => {
    harness = await openHarness();
  });
  afterAll(async () => {
    await harness?.close();
  });
  return lateBound('the harness', () => harness);
}

/** A tenant of its own per test, so tests never see each other's accounts or keys. */
export function newTenant(label: string): string {
  return `t-${label}-${randomBytes(5).toString('hex')}`.slice(0, 64);
}

export function newKey(label = 'key'): string {
  return `${label}-${randomBytes(8).toString('hex')}`;
}

export async function openAccount(
  pool: LedgerPool,
  tenant: string,
  id: string,
  options: { currency?: string; depositMinor?: number; allowOverdraft?: boolean } = {},
): Promise<Account> {
  const result = await createAccount(pool, {
    tenant,
    id,
    currency: options.currency ?? 'USD',
    allowOverdraft: options.allowOverdraft ?? false,
  });
  if ('conflict' in result) throw new Error(`account ${id} exists with other settings`);
  if (options.depositMinor) await deposit(pool, tenant, id, options.depositMinor, `open-${id}`);
  return (await getAccount(pool, tenant, id))!;
}

export interface FundedTenantOptions {
  /** Part of the tenant's id, so a test's rows are recognisable. */
  label: string;
  /** What the account `payer` starts with: 10,000 unless given. */
  payerMinor?: number;
  /** What the account `payee` starts with: nothing unless given. */
  payeeMinor?: number;
  /** Of both accounts: USD unless given. */
  currency?: string;
}

/** A new tenant with the accounts most tests charge between: a funded `payer` and a `payee`. */
export async function fundedTenant(ledger: LedgerPool | { pool: LedgerPool }, options: FundedTenantOptions): Promise<string> {
  const pool = 'query' in ledger ? ledger : ledger.pool;
  const tenant = newTenant(options.label);
  await openAccount(pool, tenant, 'payer', { depositMinor: options.payerMinor ?? 10_000, currency: options.currency });
  await openAccount(pool, tenant, 'payee', { depositMinor: options.payeeMinor, currency: options.currency });
  return tenant;
}

export async function balanceOf(pool: LedgerPool, tenant: string, id: string): Promise<Account> {
  const account = await getAccount(pool, tenant, id);
  if (!account) throw new Error(`no account ${id}`);
  return account;
}

/** Counts the debits the journal holds for one charge key: the number that must never exceed one. */
/** What a tenant has in the ledger: every number a refused start or forgery must leave as it was. */
export async function tenantLedgerFootprint(pool: LedgerPool, tenant: string) {
  const rows = await pool.query<{ charges: number; transfers: number; entries: number }>(
    `SELECT (SELECT count(*)::int FROM charges WHERE tenant = $1) AS charges,
            (SELECT count(*)::int FROM transfers WHERE tenant = $1) AS transfers,
            (SELECT count(*)::int FROM journal_entries WHERE tenant = $1) AS entries`,
    [tenant],
  );
  const payer = await balanceOf(pool, tenant, 'payer');
  const payee = await balanceOf(pool, tenant, 'payee');
  return { ...rows.rows[0]!, payer: [payer.postedMinor, payer.pendingMinor], payee: [payee.postedMinor, payee.pendingMinor] };
}

export async function captureCount(pool: LedgerPool, tenant: string, key: string): Promise<number> {
  const result = await pool.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM transfers WHERE tenant = $1 AND kind = 'capture' AND reference = $2",
    [tenant, key],
  );
  return result.rows[0]!.n;
}

/** Asserts every ledger invariant (docs/contract.md, Ledger), for one tenant and for the whole ledger. */
export async function expectLedgerInvariants(pool: LedgerPool, tenant: string): Promise<void> {
  for (const scope of [tenant, null]) {
    const checks = await checkLedgerInvariants(pool, scope);
    const broken = checks.filter((check) => check.violations > 0);
    expect(broken, `ledger invariants broken (${scope ?? 'all tenants'})`).toEqual([]);
    expect(checks.length).toBeGreaterThanOrEqual(7);
  }
}

/** Reconcile of one tenant against Temporal finds nothing wrong. */
export async function expectReconciled(h: Pick<Harness, 'pool' | 'temporal'>, tenant: string): Promise<void> {
  const report = await reconcile({ ledger: h.pool, temporal: h.temporal, tenant });
  expect(report.checks.filter((check) => check.violations > 0), formatReconcileReport(report)).toEqual([]);
  expect(report.ok).toBe(true);
}

/** Whether Temporal knows a workflow of this id; any other error than "not found" is thrown. */
export async function workflowExists(h: Pick<Harness, 'temporal'>, workflowId: string): Promise<boolean> {
  try {
    await h.temporal.workflow.getHandle(workflowId).describe();
    return true;
  } catch (error) {
    if ((error as Error).name === 'WorkflowNotFoundError') return false;
    throw error;
  }
}

/** Waits for a condition with a deadline; never a fixed sleep. */
export async function waitFor<T>(
  probe: () => Promise<T | null | undefined | false>,
  options: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 30_000);
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${options.what ?? 'a condition'}`);
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 50));
  }
}

/** A worker of the test's own, on its own task queue, with fault-injection hooks. */
export async function startTestWorker(options: {
  taskQueue: string;
  hooks?: LedgerActivityHooks;
  refundHooks?: RefundActivityHooks;
  holdSweeper?: ChargeWorkerOptions['holdSweeper'];
  pool: LedgerPool;
  /** Another Temporal server than the shared one. */
  temporalAddress?: string;
  /** Other payload keys than the run's. */
  payloadProtection?: ChargeWorkerOptions['payloadProtection'];
  /** Payment provider connectors (provider charges), usually pointed at the simulator. */
  providers?: ChargeWorkerOptions['providers'];
  providerHooks?: ChargeWorkerOptions['providerHooks'];
}): Promise<{ connection: NativeConnection; stop(): Promise<void> }> {
  const stack = inject('stack');
  const connection = await NativeConnection.connect({ address: options.temporalAddress ?? stack.temporalAddress });
  const worker: Worker = await createChargeWorker({
    connection,
    namespace: 'default',
    ledger: options.pool,
    taskQueue: options.taskQueue,
    hooks: options.hooks,
    refundHooks: options.refundHooks,
    holdSweeper: options.holdSweeper,
    workflowBundle: { codePath: stack.workflowBundlePath },
    payloadProtection: options.payloadProtection ?? testPayloadProtection(),
    providers: options.providers,
    providerHooks: options.providerHooks,
  });
  const running = worker.run();
  return {
    connection,
    stop: async () => {
      worker.shutdown();
      await running;
      await connection.close();
    },
  };
}

export function chargeBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    order_id: `order-${randomBytes(4).toString('hex')}`,
    payer_account_id: 'payer',
    payee_account_id: 'payee',
    amount: 1_000,
    currency: 'USD',
    ...overrides,
  };
}

/** A ledger in a database of its own in the same PostgreSQL, migrated like the real one. */
export interface ScratchLedger {
  pool: LedgerPool;
  databaseUrl: string;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

/**
 * The tests connect as the app role, which may not create databases; scratch ledgers are made, owned
 * and dropped by the stack's admin role (superuser-only fault injection works in them). The pool
 * argument is no longer used for that and is kept so callers read as before.
 */
export async function openScratchLedger(_callerPool: LedgerPool, options: { maxConnections?: number } = {}): Promise<ScratchLedger> {
  const name = `scratch_${newKey('db').replace(/[^a-z0-9]/g, '_')}`;
  const admin = createLedgerPool({ databaseUrl: inject('stack').adminDatabaseUrl, maxConnections: 1 });
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(inject('stack').adminDatabaseUrl);
  url.pathname = `/${name}`;
  const databaseUrl = url.toString();
  await migrateLedger(databaseUrl);
  const pool = createLedgerPool({ databaseUrl, maxConnections: options.maxConnections ?? 4 });
  return {
    pool,
    databaseUrl,
    drop: async () => {
      await pool.end();
      try {
        await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
      } finally {
        await admin.end();
      }
    },
  };
}

/** A scratch ledger for one test, dropped afterwards. */
export async function withScratchLedger(
  admin: LedgerPool,
  run: (pool: LedgerPool) => Promise<void>,
  options: { maxConnections?: number } = {},
): Promise<void> {
  const scratch = await openScratchLedger(admin, options);
  try {
    await run(scratch.pool);
  } finally {
    await scratch.drop();
  }
}

/** A scratch ledger for the tests of one file: made before them, dropped after them. */
export function useScratchLedger(options: { maxConnections?: number } = {}): ScratchLedger {
  let admin: LedgerPool | undefined;
  let scratch: ScratchLedger | undefined;
  beforeAll(async () => {
    admin = createLedgerPool({ databaseUrl: inject('stack').databaseUrl, maxConnections: 1 });
    scratch = await openScratchLedger(admin, options);
  });
  afterAll(async () => {
    await scratch?.drop();
    await admin?.end();
  });
  return lateBound('the scratch ledger', () => scratch);
}

/** An automatic-capture intent for calling the ledger functions directly, without the client. */
export function ledgerIntent(tenant: string, key: string, payer: string, payee: string, amountMinor: number): ChargeIntent {
  const request = {
    orderId: `order-${key}`,
    payerAccountId: payer,
    payeeAccountId: payee,
    amountMinor,
    currency: 'USD',
    captureMode: 'automatic' as const,
    description: null,
    metadata: null,
  };
  return { tenant, idempotencyKey: key, chargeId: chargeIdFor(tenant, key), fingerprint: chargeFingerprint(request), request };
}

/** A provider charge's intent (payer: the clearing account the ledger derives), for direct ledger and workflow calls. */
export function providerIntent(
  tenant: string,
  key: string,
  paymentMethod: string,
  options: { amountMinor?: number; captureMode?: 'automatic' | 'manual'; payee?: string; actingKeyId?: string } = {},
): ChargeIntent {
  const request = {
    orderId: `order-${key}`,
    payerAccountId: clearingAccountId('stripe', 'USD'),
    payeeAccountId: options.payee ?? 'payee',
    amountMinor: options.amountMinor ?? 1_000,
    currency: 'USD',
    captureMode: options.captureMode ?? 'automatic',
    description: null,
    metadata: null,
    paymentMethod: { provider: 'stripe' as const, id: paymentMethod },
  };
  return {
    tenant,
    idempotencyKey: key,
    chargeId: chargeIdFor(tenant, key),
    fingerprint: chargeFingerprint(request),
    request,
    ...(options.actingKeyId ? { actingKeyId: options.actingKeyId } : {}),
  };
}
