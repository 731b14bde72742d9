/**
 * Where the CPU of one charge goes. Not part of `npm run bench`: run it with
 * `npx tsx bench/experiments/worker-cpu-profile.ts [options]` (--help lists them). On a fresh bench
 * stack it runs a fixed number of charges through ChargeService.charge at one concurrency (P1's
 * path) and the same number of P1's bare baseline workflows, interleaved (A B … B A), and reports CPU
 * milliseconds per operation of each component: the load side (this process), the worker (a child
 * process by default, as a deployment runs it; with --worker in-process the two are one process),
 * the Temporal server and PostgreSQL (with its backends), and the worker's threads by name (the
 * main thread runs activities and the SDK's JavaScript side, the workflow thread runs workflow
 * code, the Rust core has threads of its own).
 *
 * --variants adds ChargeWorkflow variants on task queues of their own, each measured beside the
 * rest, to price what a change to the workflow costs before anyone patches it. Every variant but
 * current is bundled without the shared (preloaded) modules, as the workflows were bundled before
 * they existed, so no-preload is the reference the others compare with:
 *   no-preload    the current workflows, each execution evaluating every module afresh
 *   no-verify     without the forged-start check (charge-start-verified)
 *   no-upserts    without the search-attribute upserts (charge-search-attributes)
 *   final-upsert  one upsert, when the charge is decided, instead of one per status change
 *   neither       without both
 *   no-start-sas  as neither, and started without search attributes (the service sets four)
 * Each arm is a session of its own (a worker pool of 20 connections and a service pool of 16):
 * more than five arms besides the baseline exhaust the embedded PostgreSQL's 200 connections.
 *
 * What it found (N=32, worker in a child process, the machine shared with other load, so every
 * figure moved by ±3 ms between rounds): the bare workflow costs 64-79 ms of CPU per run in all
 * (load side 6-8, worker 28-33, Temporal 30-38), a charge 89-100 (worker 37-42, Temporal 37-46,
 * PostgreSQL 3-6). Without search attributes (none at start, no upserts) a charge costs ~11 ms
 * less than no-verify (Temporal ~7, worker ~3.5); upserting once instead of twice saves nothing
 * measurable, so it is the upsert's visibility update as such that costs. Without the forged-start
 * check, 3-9 ms less (worker 2-4). In the worker's workflow thread, the SDK's per-call sandbox entry
 * (vm.runInContext with its timeout watchdog) and its promise hook (a source-mapped stack trace
 * per promise, for the stack-trace query) are each a quarter to a third of the time.
 *
 * --profile takes V8 CPU profiles of each charge arm's worker (every thread, process placement),
 * keeps the samples of that arm's measured phases only and prints self and inclusive time by module
 * (SDK, protobuf, pg, our code, workflow bundle modules, ...) and the top functions. Profiling costs
 * the worker CPU of its own: compare profiled arms with each other, CPU figures with an unprofiled
 * run. Profiles are kept in --profile-dir/<arm> for a closer look in a profile viewer.
 */
import { mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { setTimeout as delay } from 'node:timers/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { Client, type WorkflowClientInterceptor } from '@temporalio/client';
import { bundleWorkflowCode } from '@temporalio/worker';
import { bundleChargeWorkflows, quietBundlerLogger } from '../../src/worker/charge-worker.js';
import { defaultSqlitePragmas } from '../../src/stack/temporal-dev-server.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { ChargeService } from '../../src/service/charge-service.js';
import { limits } from '../../src/domain/limits.js';
import { readFileIfPresent } from '../../src/support/files.js';
import { isProcessAlive } from '../../src/support/child-process.js';
import { baselineWorkflowType, type BaselineInput } from '../baseline-workflow.js';
import { startBenchStack } from '../lib/bench-stack.js';
import { clientDataConverter } from '../../src/codec/data-converter.js';
import { payloadProtectionFromEnvironment } from '../../src/codec/payload-protection.js';
import { ChargeTally, chargeBody, chargeOperation } from '../lib/charging.js';
import { takeCpuSnapshot } from '../lib/cpu.js';
import type { Operation } from '../lib/load.js';
import { openPopulation, spreadPicker, type Population } from '../lib/population.js';
import { benchPolicy, openTemporalSession, type TemporalSession } from '../lib/session.js';
import { deployedWorkerNodeFlags } from '../lib/workers.js';

const variantNames = ['current', 'no-preload', 'no-verify', 'no-upserts', 'final-upsert', 'neither', 'no-start-sas'] as const;
type VariantName = (typeof variantNames)[number];

const program = new Command()
  .name('worker-cpu-profile')
  .option('--charges <n>', 'charges per arm (and baseline workflows), over all rounds', '1500')
  .option('--concurrency <n>', 'closed-loop callers', '32')
  .option('--rounds <n>', 'rounds; each runs every arm once, every second round in reverse order', '2')
  .option('--warmup <n>', 'unmeasured operations per arm before the first round', '150')
  .option('--worker <placement>', 'process | in-process (in-process: eager start, as P1 runs by default)', 'process')
  .option('--variants <names>', `comma-separated ChargeWorkflow variants besides current (${variantNames.slice(1).join(', ')})`, '')
  .option('--profile', 'V8 CPU profiles of each charge arm\'s worker over its measured phases (process placement)')
  .option('--profile-dir <dir>', 'where the profiles go', join(tmpdir(), `chargeguard-cpu-profile-${process.pid}`))
  .option('--no-baseline', 'skip the bare baseline workflow')
  .parse();
const flags = program.opts<{
  charges: string; concurrency: string; rounds: string; warmup: string; worker: string; variants: string;
  profile?: boolean; profileDir: string; baseline: boolean;
}>();

const charges = Number(flags.charges);
const concurrency = Number(flags.concurrency);
const rounds = Number(flags.rounds);
const warmup = Number(flags.warmup);
const placement = flags.worker === 'in-process' ? 'in-process' : 'process';
const variants: VariantName[] = ['current', ...flags.variants.split(',').map((s) => s.trim()).filter(Boolean) as VariantName[]];
for (const v of variants) if (!variantNames.includes(v)) throw new Error(`unknown variant ${v}`);
const profiling = flags.profile === true && placement === 'process';
const profileDir = resolve(flags.profileDir);

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));
const dataDir = join(tmpdir(), `chargeguard-cpu-${process.pid}`);
const log = (line: string): void => void process.stderr.write(`${line}\n`);

// ---------------------------------------------------------------------------------------------
// Workflow variants: the charge workflow's source with one step taken out, bundled from a copy.

const edits: Record<Exclude<VariantName, 'current'>, [string, string][]> = {
  'no-preload': [],
  'no-verify': [['if (patched(verifiedStartPatch)) assertGenuineStart(workflowInfo().workflowId, input);', '']],
  'no-upserts': [['const indexesStatus = patched(chargeSearchAttributesPatch);', 'const indexesStatus = false;']],
  'final-upsert': [['run.charge = await reserve(run);\n  indexStatusChange(run);', 'run.charge = await reserve(run);']],
  neither: [
    ['if (patched(verifiedStartPatch)) assertGenuineStart(workflowInfo().workflowId, input);', ''],
    ['const indexesStatus = patched(chargeSearchAttributesPatch);', 'const indexesStatus = false;'],
  ],
  'no-start-sas': [
    ['if (patched(verifiedStartPatch)) assertGenuineStart(workflowInfo().workflowId, input);', ''],
    ['const indexesStatus = patched(chargeSearchAttributesPatch);', 'const indexesStatus = false;'],
  ],
};

async function variantBundle(name: Exclude<VariantName, 'current'>, dir: string): Promise<string> {
  let source = await readFile(join(repoRoot, 'workflows', 'charge-workflow.ts'), 'utf8');
  for (const [from, to] of edits[name]) {
    if (!source.includes(from)) throw new Error(`variant ${name}: workflows/charge-workflow.ts no longer contains ${JSON.stringify(from)}`);
    source = source.replace(from, to);
  }
  source = source.replaceAll("from './", `from '${repoRoot}workflows/`).replaceAll("from '../", `from '${repoRoot}`);
  const variantDir = join(dir, `variant-${name}`);
  await mkdir(variantDir, { recursive: true });
  await writeFile(join(variantDir, 'charge-workflow.ts'), source);
  await writeFile(join(variantDir, 'index.ts'), [
    "export { ChargeWorkflow } from './charge-workflow.js';",
    `export { RefundWorkflow } from '${repoRoot}workflows/refund-workflow.js';`,
    `export { OrderAgentWorkflow } from '${repoRoot}workflows/sample-agent-workflow.js';`,
    `export { HoldSweeperWorkflow, ReleaseHoldWorkflow } from '${repoRoot}workflows/hold-sweeper.js';`,
  ].join('\n'));
  const { code } = await bundleWorkflowCode({
    workflowsPath: join(variantDir, 'index.ts'),
    logger: quietBundlerLogger,
    // The copy lives outside the repository: resolve its packages from the repository's.
    webpackConfigHook: (config) => ({ ...config, resolve: { ...config.resolve, modules: [join(repoRoot, 'node_modules'), 'node_modules'] } }),
  });
  const path = join(dir, `charge-${name}.js`);
  await writeFile(path, code);
  return path;
}

/** Starts without search attributes: what the service did before it indexed charges. */
const withoutSearchAttributes: WorkflowClientInterceptor = {
  async startWithDetails(input, next) {
    const options = { ...input.options };
    delete (options as { typedSearchAttributes?: unknown }).typedSearchAttributes;
    delete (options as { searchAttributes?: unknown }).searchAttributes;
    return next({ ...input, options });
  },
};

// ---------------------------------------------------------------------------------------------
// CPU accounting: whole processes from /proc (and this one's own counters), the worker by thread.

const ticksPerSecond = 100;

/** CPU seconds of each thread of a process, summed by thread name (the main thread apart). */
async function threadSeconds(pid: number): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  let tids: string[];
  try {
    tids = await readdir(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    const text = await readFileIfPresent(`/proc/${pid}/task/${tid}/stat`);
    if (text === null) continue;
    const comm = text.slice(text.indexOf('(') + 1, text.lastIndexOf(')'));
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    const seconds = (Number(fields[11]) + Number(fields[12])) / ticksPerSecond;
    const name = tid === String(pid) ? 'main thread' : threadGroup(comm);
    out[name] = (out[name] ?? 0) + seconds;
  }
  return out;
}

/** Thread names as the kernel has them (15 characters), grouped: pools by their prefix. */
function threadGroup(comm: string): string {
  if (/^tokio|^temporal|^core/i.test(comm)) return `rust: ${comm.replace(/[-_]?\d+$/, '')}`;
  if (/^V8 /.test(comm)) return 'V8 platform (GC, compiler)';
  if (/^libuv/.test(comm)) return 'libuv pool';
  return comm.replace(/[-_]?\d+$/, '');
}

interface ArmCpu {
  operations: number;
  failed: number;
  wallMs: number;
  seconds: Record<string, number>;
  threads: Record<string, number>;
}

interface Arm {
  name: string;
  session: TemporalSession;
  operation: Operation;
  /** The worker's pid in process placement; this process otherwise. */
  workerPid: number;
  cpu: ArmCpu;
}

function add(into: Record<string, number>, before: Record<string, number>, after: Record<string, number>): void {
  for (const [name, value] of Object.entries(after)) into[name] = (into[name] ?? 0) + value - (before[name] ?? 0);
}

/** Runs `count` operations with `concurrency` callers; failures counted, never thrown. */
async function runCount(count: number, operation: Operation, firstSequence: number): Promise<number> {
  let next = 0;
  let failed = 0;
  const caller = async (): Promise<void> => {
    while (next < count) {
      const sequence = firstSequence + next++;
      await operation(sequence).catch(() => void failed++);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, caller));
  return failed;
}

// ---------------------------------------------------------------------------------------------
// Profiles: V8's .cpuprofile, samples kept only inside the measured windows, grouped by module.

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

// Module boundaries of a webpack bundle (its per-module "path" marker comments), by line.
async function bundleModules(path: string): Promise<{ line: number; module: string }[]> {
  const text = await readFile(path, 'utf8');
  const marks: { line: number; module: string }[] = [];
  text.split('\n').forEach((line, index) => {
    const match = /^\/\*\*\*\/ "(.+)"/.exec(line);
    if (match) marks.push({ line: index, module: match[1]! });
  });
  return marks;
}

function moduleOf(frame: ProfileNode['callFrame'], bundles: Map<string, { line: number; module: string }[]>): string {
  const { url, functionName } = frame;
  if (url === '') {
    if (functionName === '(garbage collector)') return 'GC';
    if (functionName === '(program)' || functionName === '(idle)' || functionName === '(root)') return functionName;
    return 'native / builtins';
  }
  for (const [bundlePath, marks] of bundles) {
    if (!url.endsWith(bundlePath)) continue;
    let module = 'workflow bundle (runtime)';
    for (const mark of marks) {
      if (mark.line > frame.lineNumber) break;
      module = mark.module;
    }
    return `workflow: ${bundleModuleGroup(module)}`;
  }
  if (url.startsWith('node:')) return 'node internals';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];
  if (pkg !== undefined) return pkg.startsWith('@temporalio/') ? `${pkg}` : pkg === 'protobufjs' || pkg === 'long' ? 'protobufjs' : pkg;
  const own = /\/(activities|workflows|bench|src\/[^/]+)\//.exec(url)?.[1];
  if (own !== undefined) return `ours: ${own}`;
  return url.split('/').slice(-2).join('/');
}

function bundleModuleGroup(module: string): string {
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)\/(lib\/)?([^/]+)?/.exec(module);
  if (pkg) return pkg[1]!.startsWith('@temporalio/') ? `${pkg[1]}` : pkg[1]!;
  const own = /(workflows|src\/[^/]+)\/([^/]+)$/.exec(module);
  if (own) return `ours: ${own[1]}/${own[2]}`;
  return module;
}

interface ProfileSummary {
  thread: string;
  sampledMs: number;
  selfByModule: Map<string, number>;
  totalByModule: Map<string, number>;
  selfByFunction: Map<string, number>;
  totalByFunction: Map<string, number>;
}

function summariseProfile(thread: string, profile: CpuProfile, windowsUs: [number, number][], bundles: Map<string, { line: number; module: string }[]>): ProfileSummary {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const summary: ProfileSummary = {
    thread, sampledMs: 0, selfByModule: new Map(), totalByModule: new Map(), selfByFunction: new Map(), totalByFunction: new Map(),
  };
  const bump = (map: Map<string, number>, key: string, ms: number): void => void map.set(key, (map.get(key) ?? 0) + ms);
  let at = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0;
    const ms = (profile.timeDeltas[i + 1] ?? 0) / 1000;
    if (!windowsUs.some(([from, to]) => at >= from && at < to)) continue;
    const leaf = byId.get(profile.samples[i]!)!;
    if (leaf.callFrame.functionName === '(idle)') continue;
    summary.sampledMs += ms;
    const leafModule = moduleOf(leaf.callFrame, bundles);
    bump(summary.selfByModule, leafModule, ms);
    bump(summary.selfByFunction, functionLabel(leaf, leafModule), ms);
    const modules = new Set<string>();
    const functions = new Set<string>();
    for (let id: number | undefined = leaf.id; id !== undefined; id = parent.get(id)) {
      const node = byId.get(id)!;
      if (node.callFrame.functionName === '(root)') continue;
      const module = moduleOf(node.callFrame, bundles);
      modules.add(module);
      functions.add(functionLabel(node, module));
    }
    for (const module of modules) bump(summary.totalByModule, module, ms);
    for (const fn of functions) bump(summary.totalByFunction, fn, ms);
  }
  return summary;
}

function functionLabel(node: ProfileNode, module: string): string {
  return `${node.callFrame.functionName || '(anonymous)'} [${module}]`;
}

function top(map: Map<string, number>, count: number, perOperation: number): string[] {
  return [...map.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, count)
    .map(([name, ms]) => `| ${name} | ${(ms / perOperation).toFixed(3)} |`);
}

// ---------------------------------------------------------------------------------------------

const stack = await startBenchStack({ dataDir, sqlitePragmas: [...defaultSqlitePragmas], keepData: false, log });
const sessions: TemporalSession[] = [];
/** Per profiled arm: its worker's pid, its profile folder and its measured windows (monotonic µs). */
const profiled = new Map<string, { pid: number; dir: string; windowsUs: [number, number][] }>();
const report: string[] = [];
try {
try {
  const bundleDir = join(dataDir, 'bundles');
  await mkdir(bundleDir, { recursive: true });
  const chargeBundlePath = join(bundleDir, 'charge.js');
  const baselineBundlePath = join(bundleDir, 'baseline.js');
  await writeFile(chargeBundlePath, (await bundleChargeWorkflows()).code);
  const baselineSource = fileURLToPath(new URL('../baseline-workflow.ts', import.meta.url));
  await writeFile(baselineBundlePath, (await bundleWorkflowCode({ workflowsPath: baselineSource, logger: quietBundlerLogger })).code);
  const bundles = new Map<VariantName, string>([['current', chargeBundlePath]]);
  for (const variant of variants) if (variant !== 'current') bundles.set(variant, await variantBundle(variant, bundleDir));

  const tuning = { maxConcurrentWorkflowTaskExecutions: 100, maxConcurrentActivityTaskExecutions: 100, maxCachedWorkflows: 100, ledgerPoolMaxConnections: 20 };
  const ledger = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 4 });
  const population: Population = await openPopulation(ledger, { tenant: `cpu-${process.pid}`, payers: 2_000, payees: 200 });
  await ledger.end();
  const tally = new ChargeTally();
  const arms: Arm[] = [];
  const servicePool = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 16 });

  // The baseline gets a worker (process) of its own, so every arm's worker runs the same set of workers.
  const units: (VariantName | 'baseline')[] = [...(flags.baseline ? ['baseline' as const] : []), ...variants];
  for (const [index, unit] of units.entries()) {
    const variant: VariantName = unit === 'baseline' ? 'current' : unit;
    const profileArm = profiling && unit !== 'baseline';
    const previousFlags = process.env.BENCH_WORKER_NODE_FLAGS;
    const armProfileDir = join(profileDir, unit);
    if (profileArm) {
      await mkdir(armProfileDir, { recursive: true });
      process.env.BENCH_WORKER_NODE_FLAGS = [...deployedWorkerNodeFlags, '--cpu-prof', `--cpu-prof-dir=${armProfileDir}`].join(' ');
    }
    const session = await openTemporalSession(stack, {
      placement,
      tuning,
      eagerStart: placement === 'in-process',
      chargeTaskQueue: `cpu-charges-${unit}`,
      baselineTaskQueue: unit === 'baseline' ? 'cpu-baseline' : null,
      bundles: { chargeBundlePath: bundles.get(variant)!, baselineBundlePath },
    });
    if (profileArm) {
      if (previousFlags === undefined) delete process.env.BENCH_WORKER_NODE_FLAGS;
      else process.env.BENCH_WORKER_NODE_FLAGS = previousFlags;
    }
    sessions.push(session);
    const workerPid = session.workers.pids[0] ?? process.pid;
    if (profileArm) profiled.set(`charge: ${variant}`, { pid: workerPid, dir: armProfileDir, windowsUs: [] });
    const service = variant === 'no-start-sas'
      ? new ChargeService({
          temporal: new Client({
            connection: session.temporal.connection,
            namespace: 'default',
            interceptors: { workflow: [withoutSearchAttributes] },
            dataConverter: clientDataConverter(payloadProtectionFromEnvironment()),
          }),
          ledger: servicePool,
          policy: benchPolicy,
          amountMinorMax: limits.amountMinorMaxDefault,
          waitBudgetMs: 30_000,
          taskQueue: session.options.chargeTaskQueue,
          eagerWorkflowStart: session.eagerStart,
        })
      : session.charges;
    const emptyCpu = (): ArmCpu => ({ operations: 0, failed: 0, wallMs: 0, seconds: {}, threads: {} });
    if (unit === 'baseline') {
      arms.push({
        name: 'baseline (bare 3-local-activity workflow)',
        session,
        workerPid,
        cpu: emptyCpu(),
        operation: async (sequence) => {
          const key = `baseline-${sequence}`;
          const intent = session.charges.buildIntent(population.tenant, key, chargeBody(key, population.payers[0]!, population.payees[0]!));
          const input: BaselineInput = { payload: { intent, policy: benchPolicy }, localActivities: true };
          await session.temporal.workflow.execute(baselineWorkflowType, {
            taskQueue: 'cpu-baseline',
            workflowId: `cpu-baseline/${key}`,
            args: [input],
            workflowIdReusePolicy: 'REJECT_DUPLICATE',
            ...(session.eagerStart ? { requestEagerStart: true } : {}),
          });
        },
      });
      continue;
    }
    arms.push({
      name: `charge: ${variant}`,
      session,
      workerPid,
      cpu: emptyCpu(),
      operation: chargeOperation(service, {
        tenant: population.tenant,
        keyPrefix: `cpu-${variant}`,
        payer: spreadPicker(population.payers, index * 211),
        payee: spreadPicker(population.payees),
        tally,
      }),
    });
  }

  let sequence = 0;
  for (const arm of arms) {
    log(`warm-up: ${arm.name}`);
    await runCount(warmup, arm.operation, sequence);
    sequence += warmup;
  }
  const perRound = Math.ceil(charges / rounds);
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? arms : [...arms].reverse();
    for (const arm of order) {
      const subjects = { temporal: stack.serverPids.temporal, postgres: stack.serverPids.postgres, worker: placement === 'process' ? arm.workerPid : null, machine: true };
      const threadsBefore = await threadSeconds(arm.workerPid);
      const before = await takeCpuSnapshot(subjects);
      const fromUs = Number(process.hrtime.bigint() / 1000n);
      const failed = await runCount(perRound, arm.operation, sequence);
      const toUs = Number(process.hrtime.bigint() / 1000n);
      const after = await takeCpuSnapshot(subjects);
      const threadsAfter = await threadSeconds(arm.workerPid);
      profiled.get(arm.name)?.windowsUs.push([fromUs, toUs]);
      sequence += perRound;
      arm.cpu.operations += perRound;
      arm.cpu.failed += failed;
      arm.cpu.wallMs += after.atMs - before.atMs;
      add(arm.cpu.seconds, before.secondsBy, after.secondsBy);
      add(arm.cpu.threads, threadsBefore, threadsAfter);
      const perOp = (name: string): string => (((after.secondsBy[name] ?? 0) - (before.secondsBy[name] ?? 0)) * 1000 / perRound).toFixed(2);
      log(`round ${round + 1} ${arm.name}: ${(perRound / ((after.atMs - before.atMs) / 1000)).toFixed(1)}/s, ` +
        `ms/op bench ${perOp('bench')} worker ${placement === 'process' ? perOp('worker') : '-'} temporal ${perOp('temporal')} postgres ${perOp('postgres')} machine ${perOp('machine')}${failed ? `, ${failed} failed` : ''}`);
    }
  }

  const components = placement === 'process' ? ['bench', 'worker', 'temporal', 'postgres'] : ['bench', 'temporal', 'postgres'];
  const loadLabel = placement === 'process' ? 'load side' : 'load side + worker';
  report.push(`\nCPU per operation, ${charges} per arm at N=${concurrency}, ${rounds} rounds; worker ${placement === 'process' ? 'in a child process (compiled, no eager start)' : 'in process (eager start)'}\n`);
  report.push(`| arm | ops/s | ${loadLabel} | ${components.slice(1).join(' | ')} | sum | machine | failed |`);
  report.push(`|---|---:|${components.map(() => '---:').join('|')}|---:|---:|---:|`);
  for (const arm of arms) {
    const ms = (name: string): number => ((arm.cpu.seconds[name] ?? Number.NaN) * 1000) / arm.cpu.operations;
    const sum = components.reduce((total, name) => total + ms(name), 0);
    report.push(`| ${arm.name} | ${((arm.cpu.operations * 1000) / arm.cpu.wallMs).toFixed(1)} | ${components.map((n) => ms(n).toFixed(2)).join(' | ')} | ${sum.toFixed(2)} | ${ms('machine').toFixed(2)} | ${arm.cpu.failed} |`);
  }
  report.push(`\nWorker threads, CPU ms per operation (${placement === 'process' ? 'the worker process' : 'this process: load side and worker together'})\n`);
  const threadNames = [...new Set(arms.flatMap((arm) => Object.keys(arm.cpu.threads)))].sort();
  report.push(`| thread | ${arms.map((arm) => arm.name).join(' | ')} |`);
  report.push(`|---|${arms.map(() => '---:').join('|')}|`);
  for (const thread of threadNames) {
    const cells = arms.map((arm) => (((arm.cpu.threads[thread] ?? 0) * 1000) / arm.cpu.operations).toFixed(2));
    if (cells.every((cell) => cell === '0.00')) continue;
    report.push(`| ${thread} | ${cells.join(' | ')} |`);
  }
  await servicePool.end();
} finally {
  for (const session of sessions.reverse()) await session.close().catch((error: unknown) => log(`closing a session: ${(error as Error).message}`));
}
// The main thread's profile is written as the worker process exits, after it said it stopped.
for (const { pid } of profiled.values()) {
  for (let waited = 0; isProcessAlive(pid) && waited < 30_000; waited += 100) await delay(100);
}
for (const [arm, { dir, windowsUs }] of profiled) await summariseProfiles(arm, dir, windowsUs);
} finally {
  await stack.stop();
}
console.log(report.join('\n'));

async function summariseProfiles(arm: string, dir: string, windowsUs: [number, number][]): Promise<void> {
  // One file per thread (main thread first, then the workflow thread): V8 names them in that order.
  await writeFile(join(dir, 'windows.json'), JSON.stringify(windowsUs));
  const files = (await readdir(dir)).filter((f) => f.endsWith('.cpuprofile')).sort();
  const chargeOperations = Math.ceil(charges / rounds) * rounds;
  const bundleMarks = new Map<string, { line: number; module: string }[]>();
  for (const file of await readdir(join(dataDir, 'bundles')).catch(() => [] as string[])) {
    if (file.endsWith('.js')) bundleMarks.set(join(dataDir, 'bundles', file), await bundleModules(join(dataDir, 'bundles', file)));
  }
  report.push(`\n## Worker CPU profile of ${arm} (V8, sampled), ms per charge over its measured phases; profiles in ${dir}`);
  for (const file of files) {
    const profile = JSON.parse(await readFile(join(dir, file), 'utf8')) as CpuProfile;
    const summary = summariseProfile(file, profile, windowsUs, bundleMarks);
    if (summary.sampledMs < 1) continue;
    report.push(`\n### ${file}: ${(summary.sampledMs / chargeOperations).toFixed(2)} ms per charge sampled (idle excluded)\n`);
    report.push('| module (self) | ms/charge |\n|---|---:|', ...top(summary.selfByModule, 15, chargeOperations));
    report.push('\n| module (inclusive) | ms/charge |\n|---|---:|', ...top(summary.totalByModule, 15, chargeOperations));
    report.push('\n| function (self) | ms/charge |\n|---|---:|', ...top(summary.selfByFunction, 25, chargeOperations));
    report.push('\n| function (inclusive) | ms/charge |\n|---|---:|', ...top(summary.totalByFunction, 30, chargeOperations));
  }
}
