/**
 * Same-run A/B of two checkouts: the "no regression" comparison (B ÷ A ≥ 0.97) with a noise small
 * enough to decide it. ONE pair of servers (dev Temporal, embedded PostgreSQL) for the whole run;
 * each checkout gets its own database (migrated by its own code) and task queues, and ONE
 * long-lived driver process (tree-ab-driver.ts, copied into that checkout and run there, so it
 * runs that checkout's ChargeService, workers and bench helpers). For each N, after one
 * unmeasured warm-up block per side, the sides take turns A B B A A B B A …, each block a closed
 * loop of N callers for a few seconds while the other side idles (its workers, and its deliverer
 * if it has one, keep polling). Each adjacent A/B pair gives one B ÷ A of raw charges/s: the
 * machine's slow drift cancels within a pair and the ABBA order cancels its linear part, and no
 * baseline's noise enters (the bench's own ratio divides by a bare workflow measured separately).
 *
 *   npx tsx bench/experiments/tree-ab.ts [--a <checkout>] [--b <checkout>] [--scenario p1|p1-provider]
 *     [--b-scenario p1|p1-provider|p1-webhook] [--n 1,8,32] [--blocks 8] [--block-s 4] [--warmup-s 4]
 *     [--a-env K=V,…] [--b-env K=V,…] [--statements]
 *
 * --statements loads pg_stat_statements (nested statements counted too) and ends the report with
 * each side's statements that took the most server time, per charge decided over the whole run
 * (warm-ups included); counting them slows the server a little, alike for both sides.
 * --a and --b default to this checkout (A/A: the method's own noise). An older checkout needs its
 * own `npm ci`; its tracked files are not touched (the driver copy is untracked and removed at the
 * end). A block's rate is charges decided ÷ the closed loop's time (its drain of in-flight calls
 * included). For p1-webhook the block then waits until its events reached the receiver, so the
 * delivery work a block causes is paid inside it (its CPU is counted) and not by the next block; that
 * wait is the deliveries' lag, not the charges' time, so the rate leaves it out. The events written
 * in the loop's last poll interval are sent during the wait, so that share of the block's delivery
 * work does not compete with the loop: at the default 1 s poll up to an eighth of an 8 s block's
 * (a few tenths of a percent of the machine's work), at 250 ms a thirty-second. The per-CPU-second
 * figure counts all of it, so read it beside the rate.
 * Beside it, each block's charges per CPU-second of the run's processes (both drivers, Temporal,
 * PostgreSQL with its backends): what a block cost rather than how fast it went, which other
 * people's work on a shared machine disturbs much less than it disturbs the rate.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { copyFile, mkdir, rm, writeFile } from 'node:fs/promises';
import { openSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { defaultSqlitePragmas } from '../../src/stack/temporal-dev-server.js';
import { startBenchStack, type BenchStack } from '../lib/bench-stack.js';
import { statementProfileSettings } from '../lib/postgres-with-settings.js';
import { takeCpuSnapshot, type CpuSnapshot } from '../lib/cpu.js';
import { round } from '../lib/stats.js';
import type { Verification } from '../lib/verify.js';
import type { BlockAnswer, DriverAnswer, DriverRequest, DriverScenario } from './tree-ab-driver.js';

const driverSource = fileURLToPath(new URL('./tree-ab-driver.ts', import.meta.url));
const thisCheckout = fileURLToPath(new URL('../..', import.meta.url)).replace(/\/$/, '');
/** How long a driver may take to open (migrate, bundle, start workers, seed accounts) or answer, milliseconds. */
const driverAnswerBudgetMs = 300_000;

const { values: flags } = parseArgs({
  options: {
    a: { type: 'string', default: '.' },
    b: { type: 'string', default: '.' },
    scenario: { type: 'string', default: 'p1' },
    'b-scenario': { type: 'string' },
    n: { type: 'string', default: '1,8,32' },
    blocks: { type: 'string', default: '8' },
    'block-s': { type: 'string', default: '4' },
    'warmup-s': { type: 'string', default: '4' },
    'a-env': { type: 'string', default: '' },
    'b-env': { type: 'string', default: '' },
    statements: { type: 'boolean', default: false },
  },
});
const scenarios: readonly DriverScenario[] = ['p1', 'p1-provider', 'p1-webhook'];
const scenarioOf = (value: string | undefined, flag: string): DriverScenario => {
  if (!scenarios.includes(value as DriverScenario)) throw new Error(`${flag}: one of ${scenarios.join(', ')}`);
  return value as DriverScenario;
};
const integerIn = (value: string | undefined, flag: string, min: number, max: number): number => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`${flag}: an integer from ${min} to ${max}`);
  return n;
};
const scenarioA = scenarioOf(flags.scenario, '--scenario');
const scenarioB = scenarioOf(flags['b-scenario'] ?? flags.scenario, '--b-scenario');
const concurrencies = flags.n.split(',').map((n) => integerIn(n, '--n', 1, 512));
const blocksPerSide = integerIn(flags.blocks, '--blocks', 2, 64);
if (blocksPerSide % 2 !== 0) throw new Error('--blocks: an even number (the order is A B B A per two pairs)');
const blockMs = integerIn(flags['block-s'], '--block-s', 1, 120) * 1000;
const warmupMs = integerIn(flags['warmup-s'], '--warmup-s', 0, 120) * 1000;

/** `K=V,K2=V2` (--a-env, --b-env): variables one side's driver gets on top of this process's. */
function sideEnvironment(pairs: string): Record<string, string> {
  return Object.fromEntries(pairs.split(',').filter((pair) => pair !== '').map((pair) => {
    const at = pair.indexOf('=');
    if (at < 1) throw new Error(`--a-env/--b-env: K=V pairs separated by commas, not ${pair}`);
    return [pair.slice(0, at), pair.slice(at + 1)];
  }));
}

const log = (line: string): void => void process.stderr.write(`${line}\n`);
const loadAverage = (): number => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
const runStartedAtMs = performance.now();
const runDir = resolve('.data/tree-ab', new Date().toISOString().replace(/[-:]/g, '').slice(0, 15));

/** One checkout's driver process and the requests it answers, one at a time. */
class Driver {
  private constructor(
    readonly name: 'A' | 'B',
    readonly checkout: string,
    readonly commit: string,
    readonly scenario: DriverScenario,
    private readonly child: ChildProcess,
    private readonly copiedDriver: string | null,
  ) {}

  /** p1-webhook: its loopback receiver's process. */
  receiverPid: number | null = null;

  static async start(name: 'A' | 'B', checkoutArg: string, scenario: DriverScenario, servers: { databaseUrl: string; temporalAddress: string }): Promise<Driver> {
    const checkout = resolve(checkoutArg);
    const commit = execFileSync('git', ['-C', checkout, 'describe', '--always', '--dirty'], { encoding: 'utf8' }).trim();
    // This checkout runs the tracked driver; another gets an untracked copy, so its relative imports resolve to its own modules.
    const copiedDriver = checkout === thisCheckout ? null : join(checkout, 'bench', 'experiments', `.tree-ab-driver-${process.pid}-${name}.ts`);
    if (copiedDriver !== null) await copyFile(driverSource, copiedDriver);
    const databaseUrl = await createDatabase(servers.databaseUrl, sideDatabase(name));
    const logFile = openSync(join(runDir, `driver-${name}.log`), 'a');
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      TREE_AB_DATA_DIR: join(runDir, `side-${name}`),
      TREE_AB_DATABASE_URL: databaseUrl,
      TREE_AB_TEMPORAL_ADDRESS: servers.temporalAddress,
      ...sideEnvironment(name === 'A' ? flags['a-env'] : flags['b-env']),
    };
    // Each driver writes its own payload key file with its own checkout's code.
    delete env.CHARGEGUARD_PAYLOAD_KEYS_FILE;
    const child = spawn(process.execPath, ['--import', 'tsx', copiedDriver ?? driverSource], { cwd: checkout, env, stdio: ['ignore', logFile, logFile, 'ipc'] });
    const driver = new Driver(name, checkout, commit, scenario, child, copiedDriver);
    const opened = await driver.ask({ type: 'open', scenario, tenant: `tree-ab-${name.toLowerCase()}-${scenario}`, queuePrefix: `tree-ab-${name.toLowerCase()}` });
    driver.receiverPid = opened.receiverPid ?? null;
    return driver;
  }

  ask(request: DriverRequest): Promise<DriverAnswer & { ok: true }> {
    return new Promise((resolvePromise, reject) => {
      const timer = setTimeout(() => settle(new Error(`driver ${this.name}: no answer to '${request.type}' within ${driverAnswerBudgetMs} ms`)), driverAnswerBudgetMs);
      const onMessage = (message: DriverAnswer): void => settle(message.ok ? null : new Error(`driver ${this.name}: ${message.error}`), message);
      const onExit = (code: number | null): void => settle(new Error(`driver ${this.name} exited (code ${code}) before answering '${request.type}'; see ${join(runDir, `driver-${this.name}.log`)}`));
      const settle = (error: Error | null, message?: DriverAnswer): void => {
        clearTimeout(timer);
        this.child.off('message', onMessage);
        this.child.off('exit', onExit);
        if (error) reject(error);
        else resolvePromise(message as DriverAnswer & { ok: true });
      };
      this.child.on('message', onMessage);
      this.child.once('exit', onExit);
      this.child.send(request);
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  async block(key: string, concurrency: number, durationMs: number): Promise<BlockAnswer> {
    return (await this.ask({ type: 'block', key, concurrency, durationMs })).block!;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.connected) {
      const exited = new Promise((resolvePromise) => this.child.once('exit', resolvePromise));
      await this.ask({ type: 'close' }).catch((error: Error) => log(error.message));
      await exited;
    }
    if (this.copiedDriver !== null) await rm(this.copiedDriver, { force: true });
  }
}

/** Statements listed per side by --statements. */
const statementsListed = 16;

/** Each side's charges so far; the statement counters start from zero here. */
async function startStatementCount(serverUrl: string): Promise<Record<'A' | 'B', number>> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    const charges = { A: await sideCharges(serverUrl, 'A'), B: await sideCharges(serverUrl, 'B') };
    await client.query('SELECT pg_stat_statements_reset()');
    return charges;
  } finally {
    await client.end();
  }
}

async function sideCharges(serverUrl: string, side: 'A' | 'B'): Promise<number> {
  const client = new pg.Client({ connectionString: databaseUrlOn(serverUrl, sideDatabase(side)) });
  await client.connect();
  try {
    return Number((await client.query<{ n: string }>('SELECT count(*) AS n FROM charges')).rows[0]!.n);
  } finally {
    await client.end();
  }
}

/** Each side's statements by server time, microseconds and calls per charge made since startStatementCount. */
async function statementReport(serverUrl: string, from: Record<'A' | 'B', number>): Promise<string[]> {
  const lines = ['', 'Server time by statement, per charge made in the run (pg_stat_statements; a function\'s time includes the statements inside it, which are listed too):', ''];
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    for (const side of ['A', 'B'] as const) {
      const charges = (await sideCharges(serverUrl, side)) - from[side];
      if (charges <= 0) throw new Error(`--statements: side ${side} made no charges in the run, nothing to divide its server time by`);
      const { rows } = await client.query<{ calls: string; ms: number; query: string }>(
        `SELECT s.calls, s.total_exec_time AS ms, s.query FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
          WHERE d.datname = $1 ORDER BY s.total_exec_time DESC LIMIT $2`,
        [sideDatabase(side), statementsListed],
      );
      lines.push(`${side}: ${charges} charges`, '', '| µs per charge | calls per charge | statement |', '|---:|---:|---|');
      for (const row of rows) {
        const text = row.query.replace(/\s+/g, ' ').slice(0, 120).replace(/\|/g, '\\|');
        lines.push(`| ${((row.ms * 1000) / charges).toFixed(1)} | ${(Number(row.calls) / charges).toFixed(2)} | \`${text}\` |`);
      }
      lines.push('');
    }
  } finally {
    await client.end();
  }
  return lines;
}

async function createDatabase(serverUrl: string, name: string): Promise<string> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE ${name}`);
  } finally {
    await client.end();
  }
  return databaseUrlOn(serverUrl, name);
}

/** The database a side's driver runs on. */
function sideDatabase(side: 'A' | 'B'): string {
  return `tree_ab_${side.toLowerCase()}`;
}

/** The server's URL naming another database on it. */
function databaseUrlOn(serverUrl: string, database: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

/**
 * Charges per second of the closed loop (its drain of in-flight calls included). Not of the block's
 * whole time: for p1-webhook that also holds the wait for the last events to arrive, which is the
 * deliveries' lag (the deliverer's next poll), not their cost; dividing by it charged B that idle
 * wall time (a median 131 ms of an 8 s block at a 250 ms poll, 1-2 %; 450-760 ms at 1 s, about 6 %).
 */
const rate = (block: BlockAnswer): number => (block.completed * 1000) / block.chargesMs;

/** CPU-seconds the run's own processes spent between two snapshots: both drivers, Temporal, PostgreSQL and its backends. */
const runCpuSeconds = (before: CpuSnapshot, after: CpuSnapshot): number =>
  ['worker', 'temporal', 'postgres'].reduce((sum, name) => sum + (after.secondsBy[name] ?? Number.NaN) - (before.secondsBy[name] ?? Number.NaN), 0);
const median = (xs: readonly number[]): number => {
  const sorted = [...xs].sort((x, y) => x - y);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

/** A 90 % percentile-bootstrap interval of the median of `xs` (2,000 resamples, fixed seed: the same data prints the same interval). */
function bootstrapMedian90(xs: readonly number[]): [number, number] {
  let state = 0x7ee_ab;
  const random = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = Math.imul(state ^ (state >>> 15), state | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const medians = Array.from({ length: 2_000 }, () => median(xs.map(() => xs[Math.floor(random() * xs.length)]!))).sort((x, y) => x - y);
  return [medians[Math.floor(0.05 * medians.length)]!, medians[Math.floor(0.95 * medians.length)]!];
}

/**
 * Where a block's CPU went: its own driver, the idle one, Temporal, PostgreSQL, its webhook
 * receiver (p1-webhook's stand-in for the caller's server, which would not share the service's
 * machine; not in the per-CPU-second figure), and the whole machine (everything, the kernel's
 * share of loopback traffic included).
 */
const cpuParts = ['own driver', 'other driver', 'temporal', 'postgres', 'receiver', 'machine'] as const;
type CpuPart = (typeof cpuParts)[number];

/** A block's CPU per charge decided, milliseconds, by part. */
function cpuMsPerCharge(side: 'A' | 'B', before: CpuSnapshot, after: CpuSnapshot, charges: number): Record<CpuPart, number> {
  const spent = (name: string): number => ((after.secondsBy[name] ?? Number.NaN) - (before.secondsBy[name] ?? Number.NaN)) * 1000 / charges;
  return {
    'own driver': spent(`driver${side}`),
    'other driver': spent(`driver${side === 'A' ? 'B' : 'A'}`),
    temporal: spent('temporal'),
    postgres: spent('postgres'),
    receiver: before.secondsBy[`receiver${side}`] === undefined ? 0 : spent(`receiver${side}`),
    machine: spent('machine'),
  };
}

interface PointResult {
  concurrency: number;
  loadBefore: number;
  loadAfter: number;
  blocks: { pair: number; side: 'A' | 'B'; block: BlockAnswer; chargesPerSecond: number; chargesPerCpuSecond: number; cpuMsPerCharge: Record<CpuPart, number> }[];
  pairRatios: number[];
  /** B ÷ A of charges per CPU-second of the run's processes, per pair. */
  cpuPairRatios: number[];
  cpuMedianRatio: number;
  cpuMinRatio: number;
  cpuMaxRatio: number;
  medianRatio: number;
  minRatio: number;
  maxRatio: number;
  bootstrap90: [number, number];
  durationS: number;
}

async function measurePoint(stack: BenchStack, a: Driver, b: Driver, concurrency: number): Promise<PointResult> {
  const cpu = (): Promise<CpuSnapshot> => takeCpuSnapshot({
      temporal: stack.serverPids.temporal,
      postgres: stack.serverPids.postgres,
      worker: [a.pid, b.pid],
      processes: {
        driverA: a.pid,
        driverB: b.pid,
        ...(a.receiverPid === null ? {} : { receiverA: a.receiverPid }),
        ...(b.receiverPid === null ? {} : { receiverB: b.receiverPid }),
      },
      machine: true,
    });
  const startedAtMs = performance.now();
  const loadBefore = loadAverage();
  if (warmupMs > 0) {
    for (const driver of [a, b]) await driver.block(`n${concurrency}-warmup`, concurrency, warmupMs);
  }
  const blocks: PointResult['blocks'] = [];
  const pairRatios: number[] = [];
  const cpuPairRatios: number[] = [];
  for (let pair = 0; pair < blocksPerSide; pair++) {
    const order = pair % 2 === 0 ? [a, b] : [b, a];
    const rates = new Map<string, number>();
    const cpuRates = new Map<string, number>();
    for (const driver of order) {
      const before = await cpu();
      const block = await driver.block(`n${concurrency}-p${pair}`, concurrency, blockMs);
      const after = await cpu();
      const chargesPerCpuSecond = block.completed / runCpuSeconds(before, after);
      const chargesPerSecond = rate(block);
      rates.set(driver.name, chargesPerSecond);
      cpuRates.set(driver.name, chargesPerCpuSecond);
      blocks.push({ pair, side: driver.name, block, chargesPerSecond, chargesPerCpuSecond, cpuMsPerCharge: cpuMsPerCharge(driver.name, before, after, block.completed) });
      if (block.failed > 0) log(`N=${concurrency} pair ${pair} ${driver.name}: ${block.failed} failed: ${block.failureSamples.join(' | ')}`);
    }
    pairRatios.push(rates.get('B')! / rates.get('A')!);
    cpuPairRatios.push(cpuRates.get('B')! / cpuRates.get('A')!);
  }
  const point: PointResult = {
    concurrency,
    loadBefore,
    loadAfter: loadAverage(),
    blocks,
    pairRatios,
    medianRatio: median(pairRatios),
    minRatio: Math.min(...pairRatios),
    maxRatio: Math.max(...pairRatios),
    bootstrap90: bootstrapMedian90(pairRatios),
    cpuPairRatios,
    cpuMedianRatio: median(cpuPairRatios),
    cpuMinRatio: Math.min(...cpuPairRatios),
    cpuMaxRatio: Math.max(...cpuPairRatios),
    durationS: (performance.now() - startedAtMs) / 1000,
  };
  log(`N=${concurrency}: B/A median ${point.medianRatio.toFixed(3)} (pairs ${pairRatios.map((r) => r.toFixed(3)).join(' ')}), per CPU-s ${point.cpuMedianRatio.toFixed(3)} (${cpuPairRatios.map((r) => r.toFixed(3)).join(' ')}), load ${loadBefore} -> ${point.loadAfter}, ${point.durationS.toFixed(0)} s`);
  return point;
}

const fixed = (value: number, digits = 3): string => (Number.isFinite(value) ? value.toFixed(digits) : 'n/a');

function report(a: Driver, b: Driver, points: PointResult[], verifications: Record<'A' | 'B', Verification>, setupS: number, totalS: number): string {
  const sideRates = (point: PointResult, side: 'A' | 'B'): number[] => point.blocks.filter((x) => x.side === side).map((x) => x.chargesPerSecond);
  const sum = (xs: number[]): number => xs.reduce((s, x) => s + x, 0);
  const lines = [
    `# tree-ab: B ÷ A of charges/s, same servers, blocks A B B A …`,
    '',
    `- A: ${a.checkout} (${a.commit}), ${a.scenario}${flags['a-env'] ? `, with ${flags['a-env']}` : ''}`,
    `- B: ${b.checkout} (${b.commit}), ${b.scenario}${flags['b-env'] ? `, with ${flags['b-env']}` : ''}`,
    `- ${blocksPerSide} blocks per side per N of ${blockMs / 1000} s (+ one ${warmupMs / 1000} s warm-up block per side); setup ${setupS.toFixed(0)} s, whole run ${totalS.toFixed(0)} s`,
    '',
    '| N | **B ÷ A median** | min–max | bootstrap 90 % | A charges/s (median) | B charges/s (median) | per CPU-second: B ÷ A median (min–max) | failed A / B | 1-min load before → after | s |',
    '|---:|---:|---|---|---:|---:|---|---|---|---:|',
  ];
  for (const point of points) {
    const failed = (side: 'A' | 'B'): number => sum(point.blocks.filter((x) => x.side === side).map((x) => x.block.failed));
    lines.push(`| ${point.concurrency} | **${fixed(point.medianRatio)}** | ${fixed(point.minRatio)}–${fixed(point.maxRatio)} | ${fixed(point.bootstrap90[0])}–${fixed(point.bootstrap90[1])} | ${fixed(median(sideRates(point, 'A')), 1)} | ${fixed(median(sideRates(point, 'B')), 1)} | ${fixed(point.cpuMedianRatio)} (${fixed(point.cpuMinRatio)}–${fixed(point.cpuMaxRatio)}) | ${failed('A')} / ${failed('B')} | ${point.loadBefore} → ${point.loadAfter} | ${point.durationS.toFixed(0)} |`);
  }
  lines.push('', 'CPU per charge decided, milliseconds, median of each side\'s blocks (10 ms ticks; "machine" also holds the receiver and anything else running):', '');
  lines.push(`| N | side | ${cpuParts.join(' | ')} |`, `|---:|---|${cpuParts.map(() => '---:').join('|')}|`);
  for (const point of points) {
    const partMedian = (side: 'A' | 'B', part: CpuPart): number => median(point.blocks.filter((x) => x.side === side).map((x) => x.cpuMsPerCharge[part]));
    for (const side of ['A', 'B'] as const) lines.push(`| ${point.concurrency} | ${side} | ${cpuParts.map((part) => fixed(partMedian(side, part), 2)).join(' | ')} |`);
    lines.push(`| ${point.concurrency} | B − A | ${cpuParts.map((part) => fixed(partMedian('B', part) - partMedian('A', part), 2)).join(' | ')} |`);
  }
  lines.push('', 'Per block, in run order (charges/s, charges per CPU-second; p1-webhook: delivery drain ms, events delivered/written):', '');
  for (const point of points) {
    const cells = point.blocks.map(({ side, block, chargesPerSecond, chargesPerCpuSecond }) =>
      `${side} ${round(chargesPerSecond)}/${round(chargesPerCpuSecond)}${block.deliveryDrainMs === null ? '' : ` (${block.deliveryDrainMs.toFixed(0)} ms, ${block.delivered}/${block.events})`}`);
    lines.push(`- N=${point.concurrency}: ${cells.join(', ')}; pair B ÷ A ${point.pairRatios.map((r) => fixed(r)).join(' ')}`);
  }
  lines.push('', 'Ledger verification at the end:', '');
  for (const side of ['A', 'B'] as const) {
    const v = verifications[side];
    lines.push(`- ${side}: ${v.ok ? 'ok' : 'FAILED'}: ${v.confirmedRows} confirmed of ${v.chargeRows} charges, callers saw ${v.succeededByCallers} succeed, ${v.keysDebitedMoreThanOnce} keys debited twice${v.problems.length > 0 ? `; ${v.problems.join('; ')}` : ''}`);
  }
  return lines.join('\n');
}

await mkdir(runDir, { recursive: true });
log(`tree-ab: logs in ${runDir}`);
const stack = await startBenchStack({
  dataDir: join(runDir, 'stack'),
  sqlitePragmas: defaultSqlitePragmas,
  keepData: false,
  log,
  ...(flags.statements ? { postgresSettings: statementProfileSettings } : {}),
});
const drivers: Driver[] = [];
try {
  const servers = { databaseUrl: stack.databaseUrl, temporalAddress: stack.temporalAddress };
  // Opened one after the other: both bundling workflows at once would be slower on a small machine, not faster.
  drivers.push(await Driver.start('A', flags.a, scenarioA, servers));
  drivers.push(await Driver.start('B', flags.b, scenarioB, servers));
  const [a, b] = drivers as [Driver, Driver];
  const setupS = (performance.now() - runStartedAtMs) / 1000;
  log(`tree-ab: both drivers ready after ${setupS.toFixed(0)} s`);
  const statementsFrom = flags.statements ? await startStatementCount(stack.databaseUrl) : null;
  const points: PointResult[] = [];
  for (const concurrency of concurrencies) points.push(await measurePoint(stack, a, b, concurrency));
  const statementLines = statementsFrom === null ? [] : await statementReport(stack.databaseUrl, statementsFrom);
  const verifications = {
    A: (await a.ask({ type: 'verify' })).verification!,
    B: (await b.ask({ type: 'verify' })).verification!,
  };
  const text = [report(a, b, points, verifications, setupS, (performance.now() - runStartedAtMs) / 1000), ...statementLines].join('\n');
  await writeFile(join(runDir, 'result.md'), `${text}\n`);
  await writeFile(join(runDir, 'result.json'), JSON.stringify({ a: { checkout: a.checkout, commit: a.commit, scenario: a.scenario }, b: { checkout: b.checkout, commit: b.commit, scenario: b.scenario }, blockMs, warmupMs, blocksPerSide, points, verifications }, null, 2));
  process.stdout.write(`${text}\n`);
  if (!verifications.A.ok || !verifications.B.ok) process.exitCode = 1;
} finally {
  for (const driver of drivers) await driver.stop();
  await stack.stop();
}
