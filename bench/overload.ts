/**
 * `npm run bench:overload`: what the service does with more work than it can decide, tried as a
 * caller would, over HTTP, against one API process and one worker process (the compiled CLI, as
 * deployed) on a fresh PostgreSQL and Temporal dev server.
 *
 * 1. Concurrency sweep: closed-loop callers (8, 16, 32, 64), each sending a new charge as soon as
 *    the last was answered: decided charges per second against charges in flight, which is what
 *    the admission bound (CHARGE_ADMISSION_MAX_IN_FLIGHT) is chosen from.
 * 2. P1 peak: 32 closed-loop callers, measured again after each overload phase: a phase's goodput
 *    is divided by the mean of the peaks on either side of it (the peak drifts within a run as the
 *    ledger and Temporal's store grow and neighbours come and go; one reading taken before could
 *    be off by a third). The offered load is twice the first reading.
 * 3. Overload: open-loop arrivals at twice the peak for 60 s (a new key each; a refused one is not
 *    resent, so the offered load stays what it is), then half the peak for 30 s. Reported: goodput
 *    (charges decided per second during the overload, by the ledger's clock) ÷ peak; every admitted
 *    charge decided, and within its wait budget + 10 s; drain time (from the drop to half load until
 *    the last charge admitted during the overload is decided); refusal latency; the API's
 *    event-loop delay (its /metrics) and the machine's load average. The caller runs in a process
 *    of its own with 64 kept-alive connections opened before its first arrival, as a caller that
 *    has been running (`--caller-connections`); `--cold-caller` runs the overload again with none,
 *    and the first second's refusals are reported apart from the rest.
 * With `--cpu-hog`, step 3 is run again in the same run with busy-looping processes (one per core)
 * competing for the CPU, in a session of their own as another program on the machine runs
 * (`--cpu-hog-shared`: in the API's and worker's session, sharing their scheduler autogroup); with `--unbounded`, once more with the bound out of the way, for the
 * before/after; with `--compare-env`, against a second bounded API process with other settings
 * (before the default one, or after it with `--compare-last`). Each overload also says where its
 * refusals' time went, from the API's Server-Timing stages, and what the API process was doing
 * while its slow refusals waited (the stall probe, lib/stall-probe.mjs, preloaded into every API
 * process). The worker runs at the niceness the product gives it (CHARGEGUARD_WORKER_NICENESS);
 * with `--worker-niceness-ab a,b` the bounded overload of step 3 runs once per niceness, in the
 * order given (swap it between runs), each with a worker process started at that niceness and
 * bracketed by peak readings taken with that worker. Every phase is named with the niceness its
 * worker's threads were found at (/proc).
 *
 * Figures, not pass/fail: the machine may be shared, so each run prints its load average.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { startCpuHogs } from '../chaos/cpu-hog.js';
import { buildCli } from '../chaos/processes.js';
import { unthrottledLimits } from '../chaos/unthrottled-limits.js';
import { createApiKey } from '../src/auth/api-keys.js';
import { loadConfig } from '../src/config.js';
import { createAccount, deposit } from '../src/ledger/accounts.js';
import { migrateLedger } from '../src/ledger/migrate.js';
import { createLedgerPool, type LedgerPool } from '../src/ledger/pool.js';
import { startChargeguardProcess, type ChargeguardProcess } from '../src/stack/chargeguard-processes.js';
import { threadNiceness } from '../src/support/thread-niceness.js';
import { findFreePort } from '../src/support/free-port.js';
import { startChargeguardStack } from '../src/runtime/local-stack.js';
import { runOpenLoops } from './lib/open-loop-caller.js';
import { embeddedServerPids, setServerNiceness } from './lib/server-priority.js';
import { cpuWindow, restOfMachineSeconds, serviceSeconds, type CpuWindow } from './lib/cpu-window.js';
import type { CpuSubjects } from './lib/cpu.js';
import { attributeStalls, readProbe, stallCauses, stallProbeUrl, type StallReport } from './lib/stall-attribution.js';
import { keyMaker, overloadPayees, overloadPayers, overloadWaitBudgetMs, sendCharge, type Answer, type Target } from './lib/overload-calls.js';

interface Flags {
  quick?: boolean;
  cpuHog?: boolean;
  cpuHogShared?: boolean;
  unbounded?: boolean;
  maxInFlight: string;
  overloadS?: string;
  compareEnv?: string;
  compareLast?: boolean;
  workerNicenessAb?: string;
  callerConnections: string;
  serverNiceness: string;
  serverNicenessAb?: string;
  coldCaller?: boolean;
  repeat: string;
}

/** What `chargeguard start` runs its embedded servers at here (CHARGEGUARD_EMBEDDED_SERVER_NICENESS, or its default). */
const serverNicenessDefault = loadConfig().CHARGEGUARD_EMBEDDED_SERVER_NICENESS;

const program = new Command()
  .name('npm run bench:overload --')
  .description('peak, then twice the peak open-loop, then half: goodput, refusals, drain (figures, not pass/fail)')
  .option('--quick', 'short phases: a smoke run of the harness, not a measurement')
  .option('--cpu-hog', 'run the overload again with one busy-looping process per core competing for the CPU, in a session of their own as another program on the machine')
  .option(
    '--cpu-hog-shared',
    "run it again with the hogs in the bench's own session, sharing the scheduler autogroup of the API and worker processes (the worst case for them)",
  )
  .option('--unbounded', 'run the overload again with the admission bound out of the way (the before)')
  .option('--max-in-flight <n>', 'CHARGE_ADMISSION_MAX_IN_FLIGHT of the API process (default: the service\'s own)', '')
  .option('--overload-s <n>', 'seconds at twice the peak (default 60, --quick 10)')
  .option(
    '--compare-env <settings>',
    'also run the overload against a second bounded API process with these settings (NAME=value,NAME=value), first: a same-run A/B',
  )
  .option(
    '--worker-niceness-ab <a,b>',
    'run the bounded overload once per worker niceness (CHARGEGUARD_WORKER_NICENESS, 0-19), in the order given, each with a worker started at it: does a worker of lower priority keep the refusing front door responsive',
  )
  .option(
    '--caller-connections <n>',
    'kept-alive connections the open-loop caller opens before its first arrival, as a caller that has been running has (0: a cold caller, which opens them as the overload begins)',
    '64',
  )
  .option(
    '--server-niceness <n>',
    'niceness of the embedded PostgreSQL and Temporal dev server (CHARGEGUARD_EMBEDDED_SERVER_NICENESS, 0-19), as `chargeguard start` runs them; 0 leaves them as started',
    String(serverNicenessDefault),
  )
  .option(
    '--server-niceness-ab <a,b>',
    'run the bounded overload once per niceness of the embedded PostgreSQL and Temporal (threads and scheduler autogroups, set in place; lowering one needs root), in the order given, each bracketed by peaks read at it',
  )
  .option(
    '--repeat <n>',
    'run the bounded overload n times (1-10), each bracketed by peak readings, and report the median goodput: one phase\'s goodput moves with the peaks read either side of it',
    '1',
  )
  .option('--cold-caller', 'run the bounded overload again with a cold caller (no connection opened before its first arrival): a same-run A/B of the caller\'s start')
  .option('--compare-last', 'run the --compare-env overload after the default one instead of before (swap the order between runs)')
  .action(async (flags: Flags) => {
    process.stdout.write(`${(await runOverloadBench(flags)).join('\n')}\n`);
  });

const waitBudgetMs = overloadWaitBudgetMs;
const payers = overloadPayers;
const payees = overloadPayees;

const newKey = keyMaker('');

/**
 * `callers` closed loops for `durationMs`: charges decided per second within the phase, by the
 * ledger's clock (a charge answered 202 still counts when it is decided within the phase).
 */
async function closedLoop(
  target: Target,
  pool: LedgerPool,
  phase: string,
  callers: number,
  durationMs: number,
  /** When given, the CPU of the loop's steady part (2 s in → 1 s before its end) is read, with the charges decided in it. */
  cpu?: CpuSubjects,
): Promise<{ perSecond: number; answers: Answer[]; cpu: PhaseCpu | null }> {
  const answers: Answer[] = [];
  const from = Date.now();
  const until = from + durationMs;
  const steady = cpu ? cpuWindow(cpu, from + 2_000, until - 1_000) : null;
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (Date.now() < until) answers.push(await sendCharge(target, newKey(phase)));
    }),
  );
  const decided = await decidedAt(pool, target.tenant, answers.map((a) => a.key));
  const within = [...decided.values()].filter((at) => at >= from && at < until).length;
  const window = steady ? await steady : null;
  return {
    perSecond: within / (durationMs / 1000),
    answers,
    cpu: window ? { window, decided: countWithin(decided.values(), window), refusals: 0 } : null,
  };
}

/** A phase's steady CPU window, with the charges decided (ledger clock) and refusals sent in it. */
interface PhaseCpu {
  window: CpuWindow;
  decided: number;
  refusals: number;
}

function countWithin(epochMs: Iterable<number>, window: CpuWindow): number {
  let n = 0;
  for (const at of epochMs) if (at >= window.fromMs && at < window.untilMs) n += 1;
  return n;
}

function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const fixed = (n: number, digits = 1): string => (Number.isFinite(n) ? n.toFixed(digits) : '–');

/** Decided time (ledger clock) of each key's row; keys without a row or still held are absent. */
async function decidedAt(pool: LedgerPool, tenant: string, keys: string[]): Promise<Map<string, number>> {
  const result = await pool.query<{ idempotency_key: string; updated_at: Date }>(
    `SELECT idempotency_key, updated_at FROM charges WHERE tenant = $1 AND idempotency_key = ANY($2::text[]) AND hold_state <> 'TRIED'`,
    [tenant, keys],
  );
  return new Map(result.rows.map((row) => [row.idempotency_key, row.updated_at.getTime()]));
}

async function rowCount(pool: LedgerPool, tenant: string, keys: string[]): Promise<number> {
  const result = await pool.query<{ n: string }>('SELECT count(*) AS n FROM charges WHERE tenant = $1 AND idempotency_key = ANY($2::text[])', [tenant, keys]);
  return Number(result.rows[0]!.n);
}

/** The API's event-loop delay p99 (prom-client's default metric), sampled every second while `during` runs. */
async function sampleEventLoop<T>(apiUrl: string, during: Promise<T>): Promise<{ value: T; lagP99Ms: number[] }> {
  const lagP99Ms: number[] = [];
  let done = false;
  const sampler = (async () => {
    while (!done) {
      const text = await fetch(`${apiUrl}/metrics`).then((r) => r.text(), () => '');
      const match = /^nodejs_eventloop_lag_p99_seconds (\S+)$/m.exec(text);
      if (match) lagP99Ms.push(Number(match[1]) * 1000);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
  })();
  try {
    return { value: await during, lagP99Ms };
  } finally {
    done = true;
    await sampler;
  }
}

interface OverloadFigures {
  name: string;
  offeredPerSecond: number;
  overloadS: number;
  answers: Record<string, number>;
  goodputPerSecond: number;
  admitted: number;
  admittedUndecided: number;
  admittedLate: number;
  decidedP50Ms: number;
  decidedP99Ms: number;
  refusals: number;
  refusedWithRows: number;
  refusalP50Ms: number;
  refusalP99Ms: number;
  /** Send → the response's head, which is what a caller acts on; refusalP50Ms/P99Ms run to its last byte. */
  refusalHeadP50Ms: number;
  refusalHeadP99Ms: number;
  /** The open-loop caller's own event-loop delay, and how late it sent its arrivals (p99), ms. */
  callerLoopDelayMs: { p50: number; p99: number; max: number };
  callerLateP99Ms: number;
  /** Refusals whose head came more than 100 ms after their send, and in how many distinct seconds (of their send) they fell: one stall or many. */
  slowRefusals: { count: number; seconds: number };
  /** The refusals sent in the overload's first second, and the rest: a caller's start (connections opened as it begins) shows in the first. */
  refusalsFirstSecond: { count: number; slow: number; headP99Ms: number };
  refusalsAfterFirstSecond: { count: number; slow: number; headP99Ms: number };
  callerConnections: number;
  /** Per stage of a refusal (the API's Server-Timing, and what the caller saw beyond the API's total): p50 and p99, ms. */
  refusalStages: Array<{ stage: string; p50Ms: number; p99Ms: number }>;
  /** What the API process was doing while the slow refusals waited (the stall probe's records). */
  stalls: StallReport | null;
  drainMs: number;
  halfRatio: number;
  /** The P1 peak measured just before and just after this phase; goodput is divided by their mean. */
  peaks: [number, number];
  lagP99MaxMs: number;
  load1m: [number, number];
  /** CPU of the overload's steady part (5 s in → 1 s before the drop), and of the peaks either side. */
  cpu: PhaseCpu | null;
  peakCpu: [PhaseCpu | null, PhaseCpu | null];
}

async function overloadPhase(
  name: string,
  /** Goes into the keys: letters, digits and dashes. */
  slug: string,
  target: Target,
  pool: LedgerPool,
  peak: number,
  overloadMs: number,
  halfMs: number,
  log: (line: string) => void,
  /** The stall probe's file of the API process `target` names. */
  probeFile: string | null,
  /** Kept-alive connections the open-loop caller opens before its first arrival. */
  callerConnections: number,
  /** Whose CPU is read during the overload's steady part (the API process as `api`). */
  cpu: CpuSubjects,
): Promise<Omit<OverloadFigures, 'peaks' | 'peakCpu'>> {
  const loadBefore = loadavg()[0]!;
  const offered = 2 * peak;
  const phaseStart = Date.now();
  const steady = cpuWindow(cpu, phaseStart + 5_000, phaseStart + overloadMs - 1_000);
  log(`${name}: ${fixed(offered)} charges/s open-loop for ${overloadMs / 1000} s, then ${fixed(peak / 2)} /s for ${halfMs / 1000} s`);
  const { value: report, lagP99Ms } = await sampleEventLoop(
    target.url,
    runOpenLoops(target, [
      { phase: `${slug}-over`, ratePerSecond: offered, durationMs: overloadMs },
      // The half load starts when the overload's arrivals end, not when its answers are all in.
      { phase: `${slug}-half`, ratePerSecond: peak / 2, durationMs: halfMs },
    ], callerConnections),
  );
  const [overAnswers, halfAnswers] = report.answers as [Answer[], Answer[]];
  // The caller process's first arrival: the ledger's times are compared with it.
  const overloadStart = Math.min(...overAnswers.map((a) => a.sentAtMs));
  const dropAt = overloadStart + overloadMs;
  const admittedAnswers = overAnswers.filter((a) => a.status === 201 || a.status === 202 || a.status === 0);
  const admittedKeys = admittedAnswers.map((a) => a.key);
  // Every admitted charge decides on its own (a 202 goes on): wait for them, up to their budget + 10 s past the last answer.
  // Requests that timed out (status 0) may have started nothing: only those with a row count as admitted.
  const timedOut = overAnswers.filter((a) => a.status === 0).map((a) => a.key);
  const timedOutWithRows = await rowCount(pool, target.tenant, timedOut);
  const admitted = admittedAnswers.filter((a) => a.status !== 0).length + timedOutWithRows;
  const settleBy = Date.now() + waitBudgetMs + 10_000;
  let decided = await decidedAt(pool, target.tenant, admittedKeys);
  while (decided.size < admitted && Date.now() < settleBy) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    decided = await decidedAt(pool, target.tenant, admittedKeys);
  }
  const latencies = admittedAnswers.filter((a) => decided.has(a.key)).map((a) => decided.get(a.key)! - a.sentAtMs);
  const refused = overAnswers.filter((a) => a.status === 503 || a.status === 429);
  const refusedWithRows = await rowCount(pool, target.tenant, refused.map((a) => a.key));
  const allDecided = await decidedAt(pool, target.tenant, [...overAnswers, ...halfAnswers].map((a) => a.key));
  const decidedDuringOverload = [...allDecided.values()].filter((at) => at >= overloadStart && at < dropAt).length;
  const overloadDecisions = admittedKeys.map((k) => decided.get(k)).filter((at): at is number => at !== undefined);
  const lastOverloadDecision = overloadDecisions.length ? Math.max(...overloadDecisions) : dropAt;
  const halfDecided = halfAnswers.filter((a) => allDecided.has(a.key)).length;
  const answers: Record<string, number> = {};
  for (const a of overAnswers) {
    const label = a.status === 0 ? `timeout/${a.type}` : a.type ? `${a.status} ${a.type}` : String(a.status);
    answers[label] = (answers[label] ?? 0) + 1;
  }
  // The probe appends once a second: its last second of the overload is in by now (the settling wait above).
  const stalls = probeFile ? attributeStalls(await readProbe(probeFile), overloadStart, dropAt, refused) : null;
  for (const line of stalls?.details ?? []) log(`${name}: slow refusal ${line}`);
  const window = await steady;
  return {
    cpu: { window, decided: countWithin(allDecided.values(), window), refusals: countWithin(refused.map((a) => a.sentAtMs), window) },
    name,
    offeredPerSecond: offered,
    overloadS: overloadMs / 1000,
    answers,
    goodputPerSecond: decidedDuringOverload / (overloadMs / 1000),
    admitted,
    admittedUndecided: admitted - overloadDecisions.length,
    admittedLate: latencies.filter((ms) => ms > waitBudgetMs + 10_000).length,
    decidedP50Ms: percentile(latencies, 50),
    decidedP99Ms: percentile(latencies, 99),
    refusals: refused.length,
    refusedWithRows,
    refusalP50Ms: percentile(refused.map((a) => a.ms), 50),
    refusalP99Ms: percentile(refused.map((a) => a.ms), 99),
    refusalHeadP50Ms: percentile(refused.map((a) => a.headMs), 50),
    refusalHeadP99Ms: percentile(refused.map((a) => a.headMs), 99),
    callerLoopDelayMs: report.loopDelayMs,
    callerLateP99Ms: percentile([...overAnswers, ...halfAnswers].map((a) => a.lateMs), 99),
    slowRefusals: slowRefusalsOf(refused),
    refusalsFirstSecond: refusalSplit(refused.filter((a) => a.sentAtMs < overloadStart + 1000)),
    refusalsAfterFirstSecond: refusalSplit(refused.filter((a) => a.sentAtMs >= overloadStart + 1000)),
    callerConnections,
    refusalStages: refusalStagesOf(refused),
    stalls,
    drainMs: Math.max(0, lastOverloadDecision - dropAt),
    halfRatio: halfAnswers.length ? halfDecided / halfAnswers.length : NaN,
    lagP99MaxMs: lagP99Ms.length ? Math.max(...lagP99Ms) : NaN,
    load1m: [loadBefore, loadavg()[0]!],
  };
}

function refusalSplit(refused: Answer[]): OverloadFigures['refusalsFirstSecond'] {
  return { count: refused.length, slow: refused.filter((a) => a.headMs > 100).length, headP99Ms: percentile(refused.map((a) => a.headMs), 99) };
}

/** The refusal target's misses (head later than 100 ms), and the distinct seconds they were sent in. */
function slowRefusalsOf(refused: Answer[]): OverloadFigures['slowRefusals'] {
  const slow = refused.filter((a) => a.headMs > 100);
  return { count: slow.length, seconds: new Set(slow.map((a) => Math.floor(a.sentAtMs / 1000))).size };
}

/**
 * Where a refusal's time went: each Server-Timing stage, the API's total, and the rest up to the
 * response's head (the caller's side, the network, the API before onRequest and after onSend).
 */
function refusalStagesOf(refused: Answer[]): OverloadFigures['refusalStages'] {
  const timed = refused.filter((a) => a.stages.total !== undefined);
  const stage = (name: string, of: (a: Answer) => number) => {
    const values = timed.map(of);
    return { stage: name, p50Ms: percentile(values, 50), p99Ms: percentile(values, 99) };
  };
  return [
    stage('auth', (a) => a.stages.auth ?? 0),
    stage('ratelimit', (a) => a.stages.ratelimit ?? 0),
    stage('admission', (a) => a.stages.admission ?? 0),
    stage('API total (onRequest → onSend)', (a) => a.stages.total!),
    stage('outside the API total (to the response\'s head)', (a) => a.headMs - a.stages.total!),
    stage('caller, to the response\'s head', (a) => a.headMs),
    stage('caller, to the last byte', (a) => a.ms),
  ];
}

async function runOverloadBench(flags: Flags): Promise<string[]> {
  const log = (line: string): void => void process.stderr.write(`[overload] ${line}\n`);
  const quick = Boolean(flags.quick);
  const nicenessAb = flags.workerNicenessAb === undefined ? null : nicenessListOf(flags.workerNicenessAb);
  const overloadMs = Number(flags.overloadS ?? (quick ? 10 : 60)) * 1000;
  const callerConnections = Number(flags.callerConnections);
  if (!Number.isInteger(callerConnections) || callerConnections < 0 || callerConnections > 1024) {
    throw new Error(`--caller-connections must be a whole number from 0 to 1024, not '${flags.callerConnections}'`);
  }
  const repeat = Number(flags.repeat);
  if (!Number.isInteger(repeat) || repeat < 1 || repeat > 10) throw new Error(`--repeat must be a whole number from 1 to 10, not '${flags.repeat}'`);
  const halfMs = quick ? 5_000 : 30_000;
  const sweepMs = quick ? 3_000 : 10_000;
  const peakMs = quick ? 5_000 : 20_000;
  const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-overload-'));
  await chmod(dataDir, 0o711);
  const processes: ChargeguardProcess[] = [];
  const out: string[] = [];
  const serverNiceness = Number(flags.serverNiceness);
  if (!Number.isInteger(serverNiceness) || serverNiceness < 0 || serverNiceness > 19) {
    throw new Error(`--server-niceness must be a whole number from 0 to 19, not '${flags.serverNiceness}'`);
  }
  const stack = await startChargeguardStack({ dataDir, temporalUiPort: null, log, serverNiceness });
  const pool = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 4, statementTimeoutMs: 60_000 });
  try {
    log('building the CLI (compiled, with its workflow bundle) and the ledger');
    const cliEntry = await buildCli(join(dataDir, 'build'));
    await migrateLedger(stack.migrationDatabaseUrl);
    const tenant = `overload-${Date.now().toString(36)}`;
    for (let i = 0; i < payers; i += 1) {
      await createAccount(pool, { tenant, id: `payer-${i}`, currency: 'USD', allowOverdraft: false });
      await deposit(pool, tenant, `payer-${i}`, 1_000_000_000, `fund-${i}`);
    }
    for (let i = 0; i < payees; i += 1) await createAccount(pool, { tenant, id: `payee-${i}`, currency: 'USD', allowOverdraft: false });
    const apiKey = (await createApiKey(pool, tenant, 'overload bench')).key;
    const env: Record<string, string> = {
      TEMPORAL_ADDRESS: stack.temporalAddress,
      DATABASE_URL: stack.databaseUrl,
      ...(stack.payloadKeysFilePath ? { CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFilePath } : {}),
      ...(stack.passwordFilePath ? { PGPASSFILE: stack.passwordFilePath } : {}),
      CHARGE_WAIT_BUDGET_MS: String(waitBudgetMs),
      // Limits out of the way: any refusal is the service protecting itself.
      ...unthrottledLimits,
    };
    const start = async (name: string, args: string[], extraEnv: Record<string, string>, readyLine: RegExp, nodeArgs: string[] = []) => {
      const started = await startChargeguardProcess({
        name,
        cli: { command: process.execPath, args: [...nodeArgs, cliEntry] },
        commandArgs: args,
        env: { ...env, ...extraEnv },
        logFilePath: join(dataDir, `${name}.log`),
        readyLine,
        startTimeoutMs: 120_000,
        stopTimeoutMs: 10_000,
      });
      processes.push(started);
      return started;
    };
    let worker = await start('worker', ['worker'], {}, /worker polling task queue/);
    const defaultWorkerNiceness = nicenessOf(worker.pid);
    const apiWith = async (
      name: string,
      maxInFlight: string,
      settings: Record<string, string> = {},
    ): Promise<{ target: Target; process: ChargeguardProcess; probeFile: string }> => {
      const port = await findFreePort();
      const probeFile = join(dataDir, `${name}.stalls.jsonl`);
      const api = await start(
        name,
        ['api', '--port', String(port), '--log-level', 'warn'],
        { ...(maxInFlight ? { CHARGE_ADMISSION_MAX_IN_FLIGHT: maxInFlight } : {}), ...settings, STALL_PROBE_FILE: probeFile },
        /API listening on/,
        ['--import', stallProbeUrl],
      );
      return { target: { url: `http://127.0.0.1:${port}`, apiKey, tenant }, process: api, probeFile };
    };
    const servers = embeddedServerPids();
    /** Whose CPU a phase reads: the servers, the worker running now, and the API process it sends to. */
    const cpuOf = (api: ChargeguardProcess): CpuSubjects => ({
      temporal: servers.temporal,
      postgres: servers.postgres,
      worker: worker.pid,
      machine: true,
      processes: { api: api.pid },
    });
    // The sweep and the peak run with the bound out of the way: they measure what the machine can do.
    const unbounded = await apiWith('api-unbounded', '10000');
    const bounded = await apiWith('api', flags.maxInFlight);
    const compareSettings = flags.compareEnv ? settingsOf(flags.compareEnv) : null;
    const compared = compareSettings ? await apiWith('api-compare', flags.maxInFlight, compareSettings) : null;
    log('warming up');
    await closedLoop(unbounded.target, pool, 'warm', 8, quick ? 2_000 : 5_000);

    const sweep: Array<{ callers: number; perSecond: number; p50Ms: number; refused: number; answered202: number }> = [];
    for (const callers of quick ? [8, 32] : [8, 16, 32, 64]) {
      const { perSecond, answers } = await closedLoop(unbounded.target, pool, `sweep${callers}`, callers, sweepMs);
      sweep.push({
        callers,
        perSecond,
        p50Ms: percentile(answers.filter((a) => a.status === 201).map((a) => a.ms), 50),
        refused: answers.filter((a) => a.status === 503).length,
        answered202: answers.filter((a) => a.status === 202).length,
      });
      log(`sweep: ${callers} callers → ${fixed(perSecond)} decided/s`);
    }
    let peakCount = 0;
    /** The CPU of each peak reading, in the order of `peaks`. */
    const peakCpus: Array<PhaseCpu | null> = [];
    const measurePeak = async (): Promise<number> => {
      const { perSecond, cpu } = await closedLoop(unbounded.target, pool, `peak${(peakCount += 1)}`, 32, peakMs, cpuOf(unbounded.process));
      peakCpus.push(cpu);
      log(`P1 peak (32 closed-loop callers), reading ${peakCount}: ${fixed(perSecond)} decided/s`);
      return perSecond;
    };
    const peaks = [await measurePeak()];
    const peak = peaks[0]!;

    const runs: OverloadFigures[] = [];
    /** One overload phase, then the peak again: the phase's goodput is read against the peaks either side of it. */
    const bracketed = async (phase: () => Promise<Omit<OverloadFigures, 'peaks' | 'peakCpu'>>): Promise<void> => {
      const before = peaks.at(-1)!;
      const cpuBefore = peakCpus.at(-1) ?? null;
      const niceness = nicenessOf(worker.pid);
      const figures = await phase();
      peaks.push(await measurePeak());
      runs.push({ ...figures, name: `${figures.name} (worker niceness ${niceness})`, peaks: [before, peaks.at(-1)!], peakCpu: [cpuBefore, peakCpus.at(-1) ?? null] });
    };
    const comparePhase = async () => {
      if (!compared) return;
      const name = `bounded, ${Object.entries(compareSettings!).map(([k, v]) => `${k}=${v}`).join(' ')}`;
      await bracketed(() => overloadPhase(name, 'compare', compared.target, pool, peak, overloadMs, halfMs, log, compared.probeFile, callerConnections, cpuOf(compared.process)));
    };
    if (!flags.compareLast) await comparePhase();
    if (nicenessAb) {
      // A worker process per niceness, started at it: a niceness once raised cannot be lowered
      // without privilege, so this is what lets either order run.
      for (const [i, niceness] of nicenessAb.entries()) {
        await worker.stop();
        worker = await start(`worker-niceness-${niceness}-${i + 1}`, ['worker'], { CHARGEGUARD_WORKER_NICENESS: String(niceness) }, /worker polling task queue/);
        log(`worker (pid ${worker.pid}) started at niceness ${niceness}; threads at ${nicenessOf(worker.pid)}`);
        // The peak before the phase is read with the same worker as the one after it.
        peaks.push(await measurePeak());
        await bracketed(() => overloadPhase('bounded', `bounded-nice${niceness}-${i + 1}`, bounded.target, pool, peak, overloadMs, halfMs, log, bounded.probeFile, callerConnections, cpuOf(bounded.process)));
      }
    } else {
      for (let i = 1; i <= repeat; i += 1) {
        const [name, slug] = repeat === 1 ? ['bounded', 'bounded'] : [`bounded, ${i} of ${repeat}`, `bounded-${i}`];
        await bracketed(() => overloadPhase(name, slug, bounded.target, pool, peak, overloadMs, halfMs, log, bounded.probeFile, callerConnections, cpuOf(bounded.process)));
      }
    }
    if (flags.compareLast) await comparePhase();
    if (flags.serverNicenessAb !== undefined) {
      for (const [i, niceness] of nicenessListOf(flags.serverNicenessAb).entries()) {
        log(`embedded servers set to niceness ${niceness}: ${setServerNiceness(niceness)} processes`);
        peaks.push(await measurePeak());
        await bracketed(() =>
          overloadPhase(`bounded, servers at niceness ${niceness}`, `servers-nice${niceness}-${i + 1}`, bounded.target, pool, peak, overloadMs, halfMs, log, bounded.probeFile, callerConnections, cpuOf(bounded.process)),
        );
      }
    }
    if (flags.coldCaller) {
      await bracketed(() => overloadPhase('bounded, cold caller', 'cold', bounded.target, pool, peak, overloadMs, halfMs, log, bounded.probeFile, 0, cpuOf(bounded.process)));
    }
    const hogSessions: Array<'own' | 'shared'> = [...(flags.cpuHog ? (['own'] as const) : []), ...(flags.cpuHogShared ? (['shared'] as const) : [])];
    for (const session of hogSessions) {
      // The hogs run during the overload only: the peaks either side are the machine's own.
      await bracketed(async () => {
        const hogs = startCpuHogs({ session });
        try {
          const name = session === 'own' ? 'bounded + CPU hog' : "bounded + CPU hog in the API's session";
          return await overloadPhase(name, `hog-${session}`, bounded.target, pool, peak, overloadMs, halfMs, log, bounded.probeFile, callerConnections, cpuOf(bounded.process));
        } finally {
          hogs.stop();
        }
      });
    }
    if (flags.unbounded) {
      await bracketed(() => overloadPhase('unbounded (before)', 'unbounded', unbounded.target, pool, peak, overloadMs, halfMs, log, unbounded.probeFile, callerConnections, cpuOf(unbounded.process)));
    }

    out.push(
      `# Overload (${quick ? 'quick: a smoke run, not a measurement' : 'full'}), ${new Date().toISOString()}`,
      '',
      `Machine: ${availableParallelism()} cores, load average (1 min) ${fixed(loadavg()[0]!, 2)} at the end. One API process, one worker process (compiled CLI; threads at niceness ${defaultWorkerNiceness}; PostgreSQL and Temporal at ${serverNiceness}${nicenessAb ? `, then a worker per niceness of ${nicenessAb.join(', ')}` : ''}), Temporal dev server, PostgreSQL; wait budget ${waitBudgetMs / 1000} s; admission bound ${flags.maxInFlight || 'the default'}.`,
      '',
      '## Charges in flight against throughput (closed loop)',
      '',
      '| callers (charges in flight) | decided/s | p50 of a 201 | answered 202 (wait budget ran out) | refused |',
      '|---|---|---|---|---|',
      ...sweep.map((s) => `| ${s.callers} | ${fixed(s.perSecond)} | ${fixed(s.p50Ms, 0)} ms | ${s.answered202} | ${s.refused} |`),
      '',
      `P1 peak, 32 closed-loop callers, ${peakMs / 1000} s each, before the first overload, after each${nicenessAb ? ' and before each phase with a worker of its own' : ''}: **${peaks.map((p) => fixed(p)).join(' → ')} decided/s** (the overloads are offered twice the first).`,
      '',
      '## Twice the peak open-loop, then half',
      '',
      '| | ' + runs.map((r) => r.name).join(' | ') + ' |',
      '|---|' + runs.map(() => '---|').join(''),
      row('offered during the overload (/s)', runs.map((r) => `${fixed(r.offeredPerSecond)} for ${r.overloadS} s`)),
      row('answers during the overload', runs.map((r) => Object.entries(r.answers).sort().map(([k, v]) => `${v} × ${k}`).join(', '))),
      row('P1 peak just before / just after the phase (decided/s)', runs.map((r) => `${fixed(r.peaks[0])} / ${fixed(r.peaks[1])}`)),
      row(
        'goodput ÷ mean of those peaks (target ≥ 0.9); ÷ each',
        runs.map((r) => `**${fixed(r.goodputPerSecond / ((r.peaks[0] + r.peaks[1]) / 2), 2)}** (${fixed(r.goodputPerSecond)}/s); ${fixed(r.goodputPerSecond / r.peaks[0], 2)} / ${fixed(r.goodputPerSecond / r.peaks[1], 2)}`),
      ),
      row('admitted charges / undecided after settling', runs.map((r) => `${r.admitted} / **${r.admittedUndecided}**`)),
      row('admitted decided later than wait budget + 10 s', runs.map((r) => String(r.admittedLate))),
      row('decided latency p50 / p99 (admitted)', runs.map((r) => `${fixed(r.decidedP50Ms / 1000, 2)} / ${fixed(r.decidedP99Ms / 1000, 2)} s`)),
      row('refusals / of them with a ledger row', runs.map((r) => `${r.refusals} / ${r.refusedWithRows}`)),
      row('refusal latency p50 / p99 (target p99 < 100 ms), to the last byte', runs.map((r) => `${fixed(r.refusalP50Ms)} / **${fixed(r.refusalP99Ms)}** ms`)),
      row('refusal latency p50 / p99, to the response\'s head', runs.map((r) => `${fixed(r.refusalHeadP50Ms)} / ${fixed(r.refusalHeadP99Ms)} ms`)),
      row('refusals answered later than 100 ms (head) / in how many distinct seconds', runs.map((r) => `${r.slowRefusals.count} / ${r.slowRefusals.seconds}`)),
      row('caller\'s connections opened before its first arrival', runs.map((r) => String(r.callerConnections))),
      row('refusals sent in the overload\'s first second: count / later than 100 ms / head p99', runs.map((r) => `${r.refusalsFirstSecond.count} / ${r.refusalsFirstSecond.slow} / ${fixed(r.refusalsFirstSecond.headP99Ms)} ms`)),
      row('refusals sent after it: count / later than 100 ms / head p99', runs.map((r) => `${r.refusalsAfterFirstSecond.count} / ${r.refusalsAfterFirstSecond.slow} / ${fixed(r.refusalsAfterFirstSecond.headP99Ms)} ms`)),
      row('caller (own process): event-loop delay p50 / p99 / max; arrivals sent late, p99', runs.map((r) => `${fixed(r.callerLoopDelayMs.p50)} / ${fixed(r.callerLoopDelayMs.p99)} / ${fixed(r.callerLoopDelayMs.max)} ms; ${fixed(r.callerLateP99Ms)} ms`)),
      row('drain: drop to half load → last overload charge decided (target ≤ 10 s)', runs.map((r) => `**${fixed(r.drainMs / 1000, 1)} s**`)),
      row('half load: share of its charges decided', runs.map((r) => fixed(r.halfRatio, 2))),
      row('API event-loop delay p99, worst second', runs.map((r) => `${fixed(r.lagP99MaxMs)} ms`)),
      row('load average (1 min) before → after', runs.map((r) => `${fixed(r.load1m[0], 2)} → ${fixed(r.load1m[1], 2)}`)),
      ...repeatedSummary(runs.filter((r) => r.name.startsWith('bounded, ') && / of \d+ \(/.test(r.name))),
      '',
      '## Where the CPU went',
      '',
      'Read from /proc over the steady part of each phase (an overload from 5 s in to 1 s before the drop; a peak from 2 s in to 1 s before its end), against the charges decided (ledger clock) and the refusals sent in that window. "Rest" is the machine\'s busy time outside the service\'s four components: the load generators (the peaks\' callers run in the bench process, the overload\'s in a process of their own), the bench, and anything else on the machine. A refusal is priced by assuming a decided charge cost what it did at the peaks either side.',
      '',
      '| | ' + runs.map((r) => r.name).join(' | ') + ' |',
      '|---|' + runs.map(() => '---|').join(''),
      ...cpuRows(runs),
      '',
      '## Where a refusal\'s time goes (the API\'s Server-Timing), p50 / p99 ms',
      '',
      '| stage | ' + runs.map((r) => r.name).join(' | ') + ' |',
      '|---|' + runs.map(() => '---|').join(''),
      ...(runs[0]?.refusalStages ?? []).map((_, i) =>
        row(runs[0]!.refusalStages[i]!.stage, runs.map((r) => `${fixed(r.refusalStages[i]!.p50Ms)} / ${fixed(r.refusalStages[i]!.p99Ms)}`)),
      ),
      '',
      '## What the API process was doing while its slow refusals waited (the stall probe)',
      '',
      'Each refusal answered later than 100 ms is put down to what the probe recorded in the API process between the caller\'s send and the API\'s onRequest, whichever covered most of that wait: a GC pause, a synchronous log write, a loop gap split by how the main thread spent it (on a CPU, waiting in the run queue, blocked off CPU); "nothing recorded" when they cover less than a fifth of it.',
      '',
      '| | ' + runs.map((r) => r.name).join(' | ') + ' |',
      '|---|' + runs.map(() => '---|').join(''),
      ...stallCauses.map((cause) => row(`slow refusals: ${cause}`, runs.map((r) => (r.stalls ? String(r.stalls.causes[cause]) : '–')))),
      row('GC pauses > 5 ms during the overload: count / total / max', runs.map((r) => (r.stalls ? `${r.stalls.gcPauses.count} / ${fixed(r.stalls.gcPauses.totalMs, 0)} / ${fixed(r.stalls.gcPauses.maxMs)} ms` : '–'))),
      row(
        'loop gaps > 50 ms: count / max; their time on a CPU / in the run queue / off CPU',
        runs.map((r) => (r.stalls ? `${r.stalls.loopGaps.count} / ${fixed(r.stalls.loopGaps.maxMs)} ms; ${fixed(r.stalls.loopGaps.cpuMs, 0)} / ${fixed(r.stalls.loopGaps.runQueueMs, 0)} / ${fixed(r.stalls.loopGaps.offCpuMs, 0)} ms` : '–')),
      ),
      row('log lines written per refusal; slow log writes; write errors', runs.map((r) => (r.stalls ? `${fixed(r.stalls.linesPerRefusal, 2)}; ${r.stalls.slowWrites}; ${r.stalls.writeErrors}` : '–'))),
      row('new TCP connections during the overload', runs.map((r) => (r.stalls ? String(r.stalls.newConnections) : '–'))),
      row(
        'slow refusals that opened a new connection; their send → accepted, median',
        runs.map((r) => (r.stalls ? `${r.stalls.onNewConnections.count}; ${fixed(r.stalls.onNewConnections.acceptedAfterP50Ms, 0)} ms` : '–')),
      ),
    );
    return out;
  } finally {
    for (const child of processes.reverse()) await child.stop().catch(() => undefined);
    await pool.end();
    await stack.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

/** `a,b`: worker nicenesses, each a whole number from 0 to 19, checked before anything starts. */
function nicenessListOf(list: string): number[] {
  const items = list.split(',').map((item) => item.trim());
  const values = items.map(Number);
  if (values.length < 2 || items.some((item) => !/^\d{1,2}$/.test(item)) || values.some((n) => n > 19)) {
    throw new Error(`--worker-niceness-ab: ${JSON.stringify(list)} is not two or more whole numbers from 0 to 19, comma-separated (e.g. 0,5)`);
  }
  return values;
}

/** The niceness the threads of process `pid` run at, as read from /proc ("?" where there is none). */
function nicenessOf(pid: number): string {
  const values = threadNiceness(pid);
  return values && values.length ? [...new Set(values)].sort((a, b) => a - b).join('/') : '?';
}

/** `NAME=value,NAME=value` as environment settings. */
function settingsOf(list: string): Record<string, string> {
  const settings: Record<string, string> = {};
  for (const pair of list.split(',')) {
    const match = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(pair.trim());
    if (!match) throw new Error(`--compare-env: ${JSON.stringify(pair)} is not NAME=value`);
    settings[match[1]!] = match[2]!;
  }
  return settings;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** With --repeat: the bounded phases' goodput and refusal p99, median and range (empty for one phase). */
function repeatedSummary(repeated: OverloadFigures[]): string[] {
  if (repeated.length < 2) return [];
  const goodputs = repeated.map((r) => r.goodputPerSecond / ((r.peaks[0] + r.peaks[1]) / 2));
  const p99s = repeated.map((r) => r.refusalHeadP99Ms);
  const range = (values: number[], digits: number, unit = ''): string =>
    `median **${fixed(median(values), digits)}${unit}** (${fixed(Math.min(...values), digits)}–${fixed(Math.max(...values), digits)}${unit})`;
  return [
    '',
    `Over the ${repeated.length} bounded phases: goodput ÷ the mean of the peaks either side ${range(goodputs, 2)}; refusal p99 to the response's head ${range(p99s, 1, ' ms')}; admitted undecided ${repeated.reduce((n, r) => n + r.admittedUndecided, 0)}, decided later than the wait budget + 10 s ${repeated.reduce((n, r) => n + r.admittedLate, 0)}, refusals with a ledger row ${repeated.reduce((n, r) => n + r.refusedWithRows, 0)}.`,
  ];
}

/** The rows of "Where the CPU went": cores per component, CPU per decided charge, and a refusal's price. */
function cpuRows(runs: OverloadFigures[]): string[] {
  const cores = (cpu: PhaseCpu | null): string => {
    if (cpu === null) return '–';
    const wallS = (cpu.window.untilMs - cpu.window.fromMs) / 1000;
    const of = (seconds: number | undefined): string => fixed((seconds ?? Number.NaN) / wallS, 2);
    const s = cpu.window.seconds;
    return `${of(s.api)} / ${of(s.worker)} / ${of(s.postgres)} / ${of(s.temporal)}; ${of(restOfMachineSeconds(cpu.window))}; ${of(s.machine)}`;
  };
  const perCharge = (cpu: PhaseCpu | null, component?: string): number =>
    cpu === null || cpu.decided === 0 ? Number.NaN : ((component ? cpu.window.seconds[component] ?? Number.NaN : serviceSeconds(cpu.window)) * 1000) / cpu.decided;
  const peakPerCharge = (r: OverloadFigures, component?: string): number => {
    const values = r.peakCpu.map((cpu) => perCharge(cpu, component)).filter(Number.isFinite);
    return values.length ? values.reduce((a, b) => a + b, 0) / values.length : Number.NaN;
  };
  const refusalPrice = (r: OverloadFigures, component?: string): number => {
    if (r.cpu === null || r.cpu.refusals === 0) return Number.NaN;
    const spentMs = (component ? r.cpu.window.seconds[component] ?? Number.NaN : serviceSeconds(r.cpu.window)) * 1000;
    return (spentMs - r.cpu.decided * peakPerCharge(r, component)) / r.cpu.refusals;
  };
  const rate = (cpu: PhaseCpu | null, n: (c: PhaseCpu) => number): string =>
    cpu === null ? '–' : fixed(n(cpu) / ((cpu.window.untilMs - cpu.window.fromMs) / 1000));
  return [
    row('overload, cores: API / worker / PostgreSQL / Temporal; rest; machine busy', runs.map((r) => cores(r.cpu))),
    row('peak before, cores (same)', runs.map((r) => cores(r.peakCpu[0]))),
    row('peak after, cores (same)', runs.map((r) => cores(r.peakCpu[1]))),
    row('window: decided/s, refusals/s (overload); decided/s (peak before / after)', runs.map((r) => `${rate(r.cpu, (c) => c.decided)}, ${rate(r.cpu, (c) => c.refusals)}; ${rate(r.peakCpu[0], (c) => c.decided)} / ${rate(r.peakCpu[1], (c) => c.decided)}`)),
    row(
      'service CPU per decided charge, ms: peak before / after; overload (refusals included)',
      runs.map((r) => `${fixed(perCharge(r.peakCpu[0]), 2)} / ${fixed(perCharge(r.peakCpu[1]), 2)}; ${fixed(perCharge(r.cpu), 2)}`),
    ),
    row('a refusal\'s price, ms of CPU: the service / the API process alone', runs.map((r) => `${fixed(refusalPrice(r), 2)} / ${fixed(refusalPrice(r, 'api'), 2)}`)),
  ];
}

function row(label: string, cells: string[]): string {
  return `| ${label} | ${cells.join(' | ')} |`;
}

program.parseAsync(process.argv).catch((error: unknown) => {
  process.stderr.write(`error: ${(error as Error)?.stack ?? String(error)}\n`);
  process.exitCode = 1;
});
