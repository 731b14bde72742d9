/**
 * One chaos run: the infrastructure and the chargeguard processes of the production shape, a storm
 * of retrying callers, faults on a timeline, then the verdict. The verdict is about money, not
 * speed: no key debited twice, every key decided once callers re-send, every repetition of a key
 * answered with the same outcome, no hold left TRIED, reconcile clean.
 */
import { mkdir, mkdtemp, rm, chmod } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@temporalio/client';
import { connectTemporalWhenReachable } from '../src/runtime/app-context.js';
import { createApiKey } from '../src/auth/api-keys.js';
import { createAccount, deposit } from '../src/ledger/accounts.js';
import { checkLedgerInvariants } from '../src/ledger/invariants.js';
import { migrateLedger } from '../src/ledger/migrate.js';
import { createLedgerPool, type LedgerPool } from '../src/ledger/pool.js';
import { captureTotals, countLedger } from '../src/ledger/reports.js';
import { reconcile } from '../src/reconcile/reconcile.js';
import { clientDataConverter } from '../src/codec/data-converter.js';
import { payloadProtectionFromSettings } from '../src/codec/payload-protection.js';
import { ensurePayloadKeyFile } from '../src/codec/payload-key-file.js';
import { findFreePorts } from '../src/support/free-port.js';
import {
  measureRecoveries,
  planFaults,
  planSingleFaults,
  runFaults,
  singleFaultRecoveries,
  type FaultKind,
  type FaultSchedule,
  type InjectedFault,
  type SingleFaultRecovery,
} from './faults.js';
import { startChaosDevServer, startChaosPostgres, type ChaosPostgres, type ChaosTemporal, type ChaosTemporalStarter } from './infrastructure.js';
import { appProcess, buildCli, type AppProcess } from './processes.js';
import { startCpuHogs, type CpuHogs } from './cpu-hog.js';
import { slowestKeyOf } from './slowest-key.js';
import { eventsAppEnv, eventsVerdict, startEventReceivers, type ChaosEventReceivers, type EventsVerdict } from './events.js';
import { armProviderFaults, providerVerdict, startChaosProvider, type ArmedProviderFault, type ChaosProvider, type ProviderVerdict } from './provider.js';

/** What `settings: 'previous'` gives the processes: Temporal's defaults, before the recovery work. */
const previousTimeouts = { WORKFLOW_TASK_TIMEOUT_MS: '10000', WORKFLOW_STICKY_SCHEDULE_TO_START_MS: '10000' } as const;
const defaultSingleFaultGapMs = 20_000;
import { createOutcomes, newStorm, runStorm, settleStorm, type AnswerCounts, type StormTarget } from './storm.js';
import { unthrottledLimits } from './unthrottled-limits.js';

export interface ChaosOptions {
  /** `--events`: webhook endpoints with receivers on loopback (one flaky), and their verdict. */
  events?: boolean;
  durationMs: number;
  workers: number;
  apis: number;
  schedule: FaultSchedule;
  /**
   * `storm`: the faults of `schedule`, overlapping; `single`: one fault at a time
   * (planSingleFaults), `singleFaultGapMs` apart, each measured on the keys it caught in flight.
   */
  mode?: 'storm' | 'single';
  singleFaultGapMs?: number;
  /** Single mode: the kinds of fault injected, in turn (default every kind of singleFaultKinds). */
  singleFaultKinds?: readonly FaultKind[];
  /**
   * `current`: the settings as shipped; `previous`: Temporal's default task timeouts (10 s each)
   * and no removal of stale membership rows, to measure what the current ones buy.
   */
  settings?: 'current' | 'previous';
  /**
   * `shared` (default): the cluster persists to the ledger's PostgreSQL, so a PostgreSQL crash takes
   * both down; `separate`: Temporal gets a PostgreSQL of its own, as production deployments run it.
   */
  temporalPostgres?: 'shared' | 'separate';
  /** How long each PostgreSQL restart keeps the server down (default 0: started again at once). */
  postgresDownMs?: number;
  /** Settings given to every worker and API process over the run's own (an A/B of one setting). */
  appEnv?: Readonly<Record<string, string>>;
  /** After the faults: how long callers keep re-sending undecided keys. */
  settleBudgetMs: number;
  /**
   * Busy-looping processes competing for the CPU while the storm runs (chaos/cpu-hog.ts); 0 or
   * absent: none. Stopped when the storm ends, so settling measures recovery.
   */
  cpuHogs?: number;
  /**
   * Provider mode: the Stripe simulator is every process's payment provider, `cardShare` of the keys
   * are card charges, and a random simulator fault is armed every `faultEveryMs` (chaos/provider.ts).
   */
  provider?: ChaosProviderOptions;
  /** Starts the Temporal the run restarts (chaos/temporal.ts); the dev server by default. */
  startTemporal?: ChaosTemporalStarter;
  log?: (line: string) => void;
}

export interface ChaosProviderOptions {
  /** Fraction of the storm's keys (0 to 1) sent as card charges. */
  cardShare: number;
  faultEveryMs: number;
}

export interface ChaosResult {
  ok: boolean;
  problems: string[];
  temporal: string;
  durationMs: number;
  keys: number;
  requests: number;
  answers: AnswerCounts;
  fiveXx: number;
  faults: InjectedFault[];
  /** Single-fault mode: each fault's recovery, measured on the keys it caught in flight. */
  singleFaults: SingleFaultRecovery[];
  mode: 'storm' | 'single';
  settings: 'current' | 'previous';
  /** Null when the ledger could not be read for it (the reason is among the problems). */
  keysDebitedTwice: number | null;
  undecidedKeys: number;
  keysWithTwoOutcomes: number;
  succeeded: number;
  declined: number;
  /** Null when the ledger could not be read for it (the reason is among the problems). */
  openHolds: number | null;
  brokenInvariants: Record<string, number>;
  reconcileOk: boolean;
  /** Why reconcile did not finish (it then counts as failed), or null. */
  reconcileError: string | null;
  /** Provider mode: the provider's side of the verdict; null otherwise. */
  provider: ProviderVerdict | null;
  /** `--events`: the webhook deliveries' verdict; null otherwise. */
  events: EventsVerdict | null;
}

const readyTimeoutMs = 120_000;
/** `--events`: how long the verdict waits for the deliveries still pending after the storm to drain. */
const eventsDrainBudgetMs = 120_000;
/** How long the verdict waits for Temporal to answer after the storm before the run fails. */
const afterStormConnectBudgetMs = 120_000;
const currency = 'USD';
const payerDepositMinor = 1_000_000_000;
const amountMinorMax = 10_000;
/**
 * Provider mode's hold TTL (HOLD_TTL_MS): a 3-D Secure charge whose payer never acts, or whose
 * provider event never arrives, expires within the settle budget instead of after 7 days.
 */
const providerModeHoldTtlMs = 60_000;
/** A 3-D Secure payer authenticates up to this long after the charge first answered requires_action. */
const payerActsAfterMsMax = 3_000;

export async function runChaos(options: ChaosOptions): Promise<ChaosResult> {
  const log = options.log ?? ((line: string) => process.stderr.write(`[chaos] ${line}\n`));
  const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-chaos-'));
  // PostgreSQL runs as its own OS user when we are root: it must be able to enter this folder.
  await chmod(dataDir, 0o711);
  await mkdir(join(dataDir, 'logs'), { recursive: true });
  const processes: AppProcess[] = [];
  let hogs: CpuHogs | null = null;
  let postgres: ChaosPostgres | null = null;
  let temporalPostgres: ChaosPostgres | null = null;
  let temporal: ChaosTemporal | null = null;
  let pool: LedgerPool | null = null;
  let provider: ChaosProvider | null = null;
  let receivers: ChaosEventReceivers | null = null;
  // A 500 is a bug whatever the money says: its request's log line must survive the run.
  let internalErrors = 0;
  try {
    const built = buildCli(join(dataDir, 'build'));
    postgres = await startChaosPostgres(dataDir, options.postgresDownMs ?? 0);
    const previous = options.settings === 'previous';
    if (options.temporalPostgres === 'separate') temporalPostgres = await startChaosPostgres(dataDir, options.postgresDownMs ?? 0, 'temporal-postgres');
    temporal = await (options.startTemporal ?? startChaosDevServer)(dataDir, temporalPostgres ?? postgres, { keepStaleMembership: previous });
    const cliEntry = await built;
    // The processes find the payload key as an embedded deployment's do: a key file in the data dir.
    const payloadKeysFile = (await ensurePayloadKeyFile(dataDir)).path;
    log(`PostgreSQL and ${temporal.kind} up (data and logs in ${dataDir})`);
    await migrateLedger(postgres.databaseUrl);
    if (options.provider !== undefined) {
      provider = await startChaosProvider();
      log(`Stripe simulator at ${provider.simulator.url}`);
    }
    const tenant = `chaos-${Date.now().toString(36)}`;
    // Before the tenant is funded: every event of the run, its deposits included, is then delivered.
    if (options.events) {
      receivers = await withPool(postgres.databaseUrl, (setup) => startEventReceivers(setup, tenant));
      log(`${receivers.receivers.length} webhook receivers on loopback (the first flaky: every third request answered 500)`);
    }
    const target = await withPool(postgres.databaseUrl, (setup) => fundTenant(setup, tenant));

    const env = {
      TEMPORAL_ADDRESS: temporal.address,
      DATABASE_URL: postgres.databaseUrl,
      CHARGEGUARD_PAYLOAD_KEYS_FILE: payloadKeysFile,
      CHARGE_WAIT_BUDGET_MS: '10000',
      // The storm is one agent key of one tenant far beyond the default request rate: the run is
      // about money under faults, so the limiter (tested on its own) does not throttle it.
      ...unthrottledLimits,
      ...(previous ? previousTimeouts : {}),
      ...(provider === null ? {} : { ...provider.env, HOLD_TTL_MS: String(providerModeHoldTtlMs) }),
      ...(options.events ? eventsAppEnv : {}),
      ...options.appEnv,
    };
    const workers = Array.from({ length: options.workers }, (_, index) =>
      appProcess({ name: `worker-${index + 1}`, cliEntry, args: ['worker'], env, readyLine: /worker polling task queue/, logDir: join(dataDir, 'logs'), readyTimeoutMs, log }),
    );
    const apiPorts = await findFreePorts(options.apis);
    const apis = apiPorts.map((port, index) =>
      appProcess({
        name: `api-${index + 1}`,
        cliEntry,
        args: ['api', '--port', String(port), '--log-level', 'warn'],
        env,
        readyLine: /API listening on/,
        logDir: join(dataDir, 'logs'),
        readyTimeoutMs,
        log,
      }),
    );
    processes.push(...workers, ...apis);
    await Promise.all(processes.map((child) => child.start()));
    log(`${workers.length} workers and ${apis.length} API processes ready`);
    target.apiUrls = apiPorts.map((port) => `http://127.0.0.1:${port}`);
    if (provider !== null && options.provider !== undefined) {
      provider.deliverEventsTo(target.apiUrls[0]!);
      target.cards = { share: options.provider.cardShare, simulatorUrl: provider.simulator.url, payerActsAfterMsMax };
    }

    const storm = newStorm();
    const countInternalErrors = (): void => {
      internalErrors = storm.answers['500'] ?? 0;
    };
    hogs = options.cpuHogs ? startCpuHogs({ count: options.cpuHogs }) : null;
    if (hogs !== null) log(`${hogs.count} CPU hog processes busy-looping until the storm ends`);
    const startedAtMs = Date.now();
    const mode = options.mode ?? 'storm';
    const plan = mode === 'single' ? planSingleFaults(options.singleFaultGapMs ?? defaultSingleFaultGapMs, options.durationMs, options.singleFaultKinds) : planFaults(options.schedule, options.durationMs);
    const [faults, , armed] = await Promise.all([
      runFaults(plan, { postgres, temporalPostgres, temporal, workers }, { startedAtMs, durationMs: options.durationMs, log }),
      runStorm(storm, target, { untilEpochMs: startedAtMs + options.durationMs, amountMinorMax, resendUntilDecided: mode === 'single' }),
      provider !== null && options.provider !== undefined
        ? armProviderFaults(provider.simulator, { startedAtMs, durationMs: options.durationMs, everyMs: options.provider.faultEveryMs, log })
        : Promise.resolve([] as ArmedProviderFault[]),
    ]);
    // The provider's faults end with the others: settling measures recovery, not more faults.
    provider?.simulator.faults.clear();
    hogs?.stop();
    log(`storm over: ${storm.keys.size} keys; settling the undecided ones`);
    const undecided = await settleStorm(storm, target, { deadlineEpochMs: Date.now() + options.settleBudgetMs });
    const durationMs = Date.now() - startedAtMs;
    measureRecoveries(faults, storm.decidedAtMs);
    const singleFaults = mode === 'single' ? singleFaultRecoveries(faults, [...storm.keys.values()], storm.decidedAtMs) : [];
    countInternalErrors();

    // A pool opened now: connections from before the restarts would only report them.
    pool = createLedgerPool({ databaseUrl: postgres.databaseUrl, maxConnections: 4 });
    // Waited for, not assumed: the last restart's server may still be settling its membership on a
    // loaded machine, and a single 10 s connect once failed the whole verdict on one.
    // Without Temporal the verdict still reads the ledger (reconcile's workflow checks are then
    // skipped) and names the failure, rather than ending the run with no verdict at all.
    const connection = await connectTemporalWhenReachable(temporal.address, 'default', {
      limits: { initialDelayMs: 250, maxDelayMs: 2_000, budgetMs: afterStormConnectBudgetMs },
      log,
    }).catch((error: unknown) => {
      log(`Temporal did not answer after the storm: ${(error as Error).message}`);
      return null;
    });
    const client =
      connection === null
        ? null
        : new Client({ connection, dataConverter: clientDataConverter(payloadProtectionFromSettings({ CHARGEGUARD_PAYLOAD_KEYS_FILE: payloadKeysFile })) });
    try {
      const keyRecords = [...storm.keys.values()];
      for (const [index, recovery] of singleFaults.entries()) {
        if (client === null) break;
        recovery.slowestKey = await slowestKeyOf(faults[index]!, keyRecords, tenant, client).catch((error: unknown) => {
          log(`the slowest key of fault ${index + 1} could not be read: ${(error as Error).message}`);
          return null;
        });
      }
      return await verdict({
        pool,
        temporal: client,
        tenant,
        storm,
        faults,
        undecided,
        durationMs,
        temporalKind: temporal.kind,
        singleFaults,
        mode,
        settings: options.settings ?? 'current',
        provider: provider === null ? null : { provider, armed },
        events: receivers,
      });
    } finally {
      await connection?.close();
    }
  } finally {
    hogs?.stop();
    await Promise.allSettled(processes.map((child) => child.stop()));
    await pool?.end();
    await Promise.allSettled([temporal?.stop(), postgres?.stop(), provider?.stop(), receivers?.stop()]);
    await temporalPostgres?.stop();
    if (process.env.CHARGEGUARD_CHAOS_KEEP_DATA === undefined && internalErrors === 0) await rm(dataDir, { recursive: true, force: true });
    else log(`data and logs kept in ${dataDir}${internalErrors > 0 ? ` (${internalErrors} answers were 500: the API logs name each request id)` : ''}`);
  }
}

async function withPool<T>(databaseUrl: string, use: (pool: LedgerPool) => Promise<T>): Promise<T> {
  const pool = createLedgerPool({ databaseUrl, maxConnections: 2 });
  try {
    return await use(pool);
  } finally {
    await pool.end();
  }
}

async function fundTenant(pool: LedgerPool, tenant: string): Promise<StormTarget> {
  for (const id of ['payer', 'payee']) {
    await createAccount(pool, { tenant, id, currency, allowOverdraft: false });
  }
  await deposit(pool, tenant, 'payer', payerDepositMinor, 'chaos-funding');
  const { key } = await createApiKey(pool, tenant, 'chaos storm', 'agent');
  return { apiUrls: [], apiKey: key, payerAccountId: 'payer', payeeAccountId: 'payee', currency };
}

export async function verdict(p: {
  pool: LedgerPool;
  /** Null when Temporal did not answer after the storm: named as a problem, the ledger still read. */
  temporal: Client | null;
  tenant: string;
  storm: ReturnType<typeof newStorm>;
  faults: InjectedFault[];
  undecided: string[];
  durationMs: number;
  temporalKind: string;
  singleFaults: SingleFaultRecovery[];
  mode: 'storm' | 'single';
  settings: 'current' | 'previous';
  provider: { provider: ChaosProvider; armed: ArmedProviderFault[] } | null;
  /** `--events`: the receivers whose deliveries the verdict counts; none by default. */
  events?: ChaosEventReceivers | null;
  /** Reconcile's own statement limit (default reconcileDefaults.reconcileStatementTimeoutMs). */
  reconcileStatementTimeoutMs?: number;
}): Promise<ChaosResult> {
  const records = [...p.storm.keys.values()];
  const succeeded = records.filter((record) => record.outcomes.has('succeeded') || record.settled === 'succeeded').length;
  const declined = records.filter((record) => record.outcomes.has('declined')).length;
  const keysWithTwoOutcomes = records.filter((record) => createOutcomes(record).size > 1).length;
  const fiveXx = Object.entries(p.storm.answers)
    .filter(([answer]) => answer.startsWith('5'))
    .reduce((sum, [, n]) => sum + n, 0);

  const problems: string[] = [];
  // Each reading of the ledger may fail on its own (a statement limit after a crash, a server still
  // restarting): the verdict prints what the others found, with the failure named as a problem,
  // instead of the run ending without one.
  const attempt = async <T>(what: string, read: () => Promise<T>): Promise<{ value: T; error: null } | { value: null; error: string }> => {
    try {
      return { value: await read(), error: null };
    } catch (error) {
      const said = (error as Error).message;
      const message = said.startsWith(`${what} did not finish`) ? said : `${what} did not finish: ${said}`;
      problems.push(message);
      return { value: null, error: message };
    }
  };
  if (p.temporal === null) problems.push(`Temporal did not answer within ${afterStormConnectBudgetMs} ms after the storm: the workflow checks were skipped`);
  const totals = (await attempt('the capture totals', () => captureTotals(p.pool, p.tenant))).value;
  const counts = (await attempt('the ledger counts', () => countLedger(p.pool, p.tenant))).value;
  const invariants = (await attempt('the ledger invariants', () => checkLedgerInvariants(p.pool, p.tenant))).value;
  const brokenInvariants = Object.fromEntries((invariants ?? []).filter((check) => check.violations > 0).map((check) => [check.name, check.violations]));
  const reconciled = await attempt('reconcile', () => reconcile({ ledger: p.pool, temporal: p.temporal, tenant: p.tenant, reconcileStatementTimeoutMs: p.reconcileStatementTimeoutMs }));
  const report = reconciled.value;

  if (totals && totals.keysCapturedMoreThanOnce > 0) problems.push(`${totals.keysCapturedMoreThanOnce} keys debited more than once`);
  if (p.undecided.length > 0) problems.push(`${p.undecided.length} keys never decided, e.g. ${p.undecided.slice(0, 3).join(', ')}`);
  if (keysWithTwoOutcomes > 0) problems.push(`${keysWithTwoOutcomes} keys answered with two different outcomes`);
  if (totals && totals.confirmedRows !== succeeded) problems.push(`callers were told ${succeeded} charges succeeded; the ledger confirmed ${totals.confirmedRows}`);
  if (counts && counts.openHolds > 0) problems.push(`${counts.openHolds} holds still TRIED`);
  for (const [name, violations] of Object.entries(brokenInvariants)) problems.push(`invariant ${name}: ${violations} violations`);
  if (report && !report.ok) problems.push(`reconcile: ${report.checks.filter((check) => check.violations > 0).map((check) => check.name).join(', ')}`);
  for (const fault of p.faults) if (fault.error) problems.push(`${fault.kind} could not be injected: ${fault.error}`);
  if (records.length === 0) problems.push('the storm sent no key');
  const provider = p.provider === null ? null : (await attempt('the provider verdict', () => providerVerdict({ ...p.provider!, pool: p.pool, tenant: p.tenant, storm: p.storm, holdTtlMs: providerModeHoldTtlMs }))).value;
  problems.push(...(provider?.problems ?? []));
  // Every event to every endpoint, after the workers (still running) have drained what is due.
  const events = (p.events ?? null) === null ? null : (await attempt('the events verdict', () => eventsVerdict(p.pool, p.tenant, p.events!, eventsDrainBudgetMs))).value;
  if (events !== null) {
    if (events.lost > 0) problems.push(`events: ${events.lost} event x endpoint deliveries never arrived`);
    if (events.badSignatures > 0) problems.push(`events: ${events.badSignatures} deliveries whose signature did not verify`);
    if (events.failed > 0) problems.push(`events: ${events.failed} deliveries failed for good`);
  }

  return {
    ok: problems.length === 0,
    problems,
    temporal: p.temporalKind,
    durationMs: p.durationMs,
    keys: records.length,
    requests: records.reduce((sum, record) => sum + record.requests, 0),
    answers: p.storm.answers,
    fiveXx,
    faults: p.faults,
    singleFaults: p.singleFaults,
    mode: p.mode,
    settings: p.settings,
    keysDebitedTwice: totals?.keysCapturedMoreThanOnce ?? null,
    undecidedKeys: p.undecided.length,
    keysWithTwoOutcomes,
    succeeded,
    declined,
    openHolds: counts?.openHolds ?? null,
    brokenInvariants,
    reconcileOk: report?.ok ?? false,
    reconcileError: reconciled.error,
    provider,
    events,
  };
}
