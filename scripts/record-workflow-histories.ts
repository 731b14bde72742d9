/**
 * Records real workflow histories, one per path through the workflow code (scripts/history-paths.ts),
 * for the replay test that guards every workflow change: a deployment must replay the charges that
 * are in flight, and queries of closed ones replay too. Run it after changing workflow code, never
 * to "fix" a failing replay: an older generation that no longer replays means the change needs
 * `patched()` (docs/deploying-workflow-changes.md).
 *
 *   npm run record-histories                      # record from the code in this working tree
 *   npm run record-histories -- --generation v3-something
 *   npm run record-histories -- --replace-latest   # the newest generation was never deployed
 *
 * Histories are kept in generations, test/histories/<generation>/: each generation is what one
 * version of the code wrote, and an execution that version started may still be open when the next
 * version deploys, so older generations are kept and replayed. A run writes into the newest
 * generation when it was recorded from the same code, or was never committed (so never deployed),
 * or when --replace-latest says so; otherwise it starts a new generation.
 *
 * It starts its own Temporal dev server and PostgreSQL, as the tests do (TEMPORAL_ADDRESS and
 * DATABASE_URL point it at running ones instead), and runs the workflows on a task queue of its
 * own, so no other worker's code can end up in a recording.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { DefaultLogger, NativeConnection, Runtime, Worker } from '@temporalio/worker';
import type { LedgerStep } from '../activities/index.js';
import { ChargeService } from '../src/service/charge-service.js';
import { createAccount, deposit } from '../src/ledger/accounts.js';
import { migrateLedger } from '../src/ledger/migrate.js';
import { createLedgerPool } from '../src/ledger/pool.js';
import { bundleChargeWorkflows, createChargeWorker } from '../src/worker/charge-worker.js';
import { StripeSimulator } from '../src/providers/stripe/simulator/server.js';
import { StripeConnector } from '../src/providers/stripe/connector.js';
import type { ChargePolicy } from '../workflows/definitions.js';
import { chargeGeneration6Patch } from '../workflows/patches.js';
import { historyPaths, type HistoryPath, type RecordingContext, type WorkflowRef } from './history-paths.js';
import {
  EventType,
  encodeHistory,
  historiesDir,
  latestGeneration,
  manifestAbout,
  patchMarkers,
  readHistory,
  readManifest,
  repoDir,
  workflowCodeHash,
  workflowTypeOf,
  writeManifest,
  type Generation,
  type History,
  type HistoryEntry,
  type Manifest,
  type WorkflowCodeHash,
} from './workflow-histories.js';
import { startChargeguardStack } from '../src/runtime/local-stack.js';

/**
 * Patches every new history of a workflow type must carry: the code paths production runs. A
 * recording without one of them took a branch only pre-patch executions take, and would leave
 * the current branch unguarded. Add a patch here when every new execution calls patched() for it.
 */
const requiredPatches: Record<string, string[]> = {
  ChargeWorkflow: [chargeGeneration6Patch],
};

/** How long a late worker's first task waits in its queue: past 80% of the default 10 s workflow task timeout. */
const lateWorkerDelayMs = 9_000;

/** Long enough for the slowest path (a budget timer sent with a workflow task heartbeat, ~8 s, then its 3 s). */
const pathDeadlineMs = 120_000;

const closingEvents = new Set<number>([
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
  EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
]);

const { values: args } = parseArgs({
  options: {
    generation: { type: 'string' },
    'replace-latest': { type: 'boolean', default: false },
    /** At most this many paths at once (all of them when absent); fewer on a loaded machine, whose workflow task timeouts otherwise steer the timing-dependent paths. */
    concurrency: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  process.stdout.write('usage: npm run record-histories [-- --generation <name>] [-- --replace-latest] [-- --concurrency <paths at once>]\n');
  process.exit(0);
}

const log = (line: string): void => void process.stdout.write(`${line}\n`);

function git(...gitArgs: string[]): string | null {
  try {
    return execFileSync('git', gitArgs, { cwd: repoDir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return null;
  }
}

/** Where the recorded code came from, so a reviewer can tell a recording of uncommitted code. */
function sourceCommit(codeHash: WorkflowCodeHash): string | null {
  const head = git('rev-parse', '--short', 'HEAD');
  if (head === null) return null;
  const dirty = git('status', '--porcelain', '--', ...Object.keys(codeHash.files));
  if (dirty) {
    log(`warning: recording uncommitted workflow code:\n${dirty}`);
    return `${head} with uncommitted changes`;
  }
  return head;
}

function isCommitted(generation: Generation): boolean {
  // Without git nothing can be told apart: keep what is there.
  const files = git('ls-tree', '-r', '--name-only', 'HEAD', '--', relative(repoDir, join(historiesDir, generation.name)));
  return files === null || files !== '';
}

/** The generation to write, and the one it replaces (null: a new generation). */
function target(manifest: Manifest, codeHash: WorkflowCodeHash): { name: string; replaces: string | null } {
  const latest = latestGeneration(manifest);
  const autoName = (n: number): string => `v${n}-${codeHash.sha256.slice(0, 8)}`;
  if (args.generation !== undefined) {
    if (!/^[A-Za-z0-9._-]+$/.test(args.generation)) throw new Error(`generation name ${args.generation}: letters, digits, . _ - only`);
    const existing = manifest.generations.find((g) => g.name === args.generation);
    if (existing && existing !== latest) {
      throw new Error(`${args.generation} is an older generation: what deployed code wrote is kept as it is`);
    }
    return { name: args.generation, replaces: existing ? existing.name : null };
  }
  if (latest) {
    if (latest.codeHash?.sha256 === codeHash.sha256) return { name: latest.name, replaces: latest.name };
    let replace = args['replace-latest'];
    if (!replace && !isCommitted(latest)) {
      log(`${latest.name} was never committed: recording over it instead of starting a new generation`);
      replace = true;
    }
    // A name the recorder made up carries the hash of the code it was recorded from: keep it true.
    if (replace) {
      const name = /^v\d+-[0-9a-f]{8}$/.test(latest.name) ? autoName(manifest.generations.length) : latest.name;
      return { name, replaces: latest.name };
    }
  }
  return { name: autoName(manifest.generations.length + 1), replaces: null };
}

/** --concurrency, checked: every path at once when absent. */
function pathConcurrency(): number {
  if (args.concurrency === undefined) return historyPaths.length;
  const n = Number(args.concurrency);
  if (!Number.isSafeInteger(n) || n < 1) throw new Error(`--concurrency ${args.concurrency}: a whole number of paths, at least 1`);
  return n;
}

async function withDeadline<T>(what: string, ms: number, run: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([run(), expired]);
  } finally {
    clearTimeout(timer);
  }
}

interface Recorded {
  path: HistoryPath;
  ref: WorkflowRef;
  history: History;
}

/** Every problem of a recording, so one run names them all. */
function problemsOf({ path, ref, history }: Recorded): string[] {
  const problems: string[] = [];
  const last = history.events?.at(-1)?.eventType;
  if (last === undefined || last === null || !closingEvents.has(last)) {
    problems.push(`${path.name}: ${ref.workflowId} had not closed when its history was fetched`);
  }
  const carried = patchMarkers(history);
  for (const patch of requiredPatches[workflowTypeOf(history)] ?? []) {
    if (!carried.includes(patch)) problems.push(`${path.name}: no '${patch}' patch marker (carries ${JSON.stringify(carried)})`);
  }
  return problems;
}

async function replayFailures(
  bundlePath: string,
  histories: Array<{ label: string; workflowId: string; history: History }>,
): Promise<string[]> {
  const byId = new Map(histories.map((h) => [h.workflowId, h.label]));
  const failures: string[] = [];
  const results = Worker.runReplayHistories(
    { workflowBundle: { codePath: bundlePath } },
    histories.map(({ workflowId, history }) => ({ workflowId, history })),
  );
  for await (const result of results) {
    if (result.error) failures.push(`${byId.get(result.workflowId) ?? result.workflowId}: ${result.error.message}`);
  }
  return failures;
}

async function main(): Promise<number> {
  const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-record-'));
  try {
    return await recordInto(dataDir);
  } finally {
    await rm(dataDir, { recursive: true, force: true });
  }
}

async function recordInto(dataDir: string): Promise<number> {
  const codeHash = workflowCodeHash();
  const commit = sourceCommit(codeHash);
  const manifest: Manifest = existsSync(join(historiesDir, 'manifest.json'))
    ? await readManifest()
    : { about: manifestAbout, generations: [] };
  const generation = target(manifest, codeHash);
  const names = historyPaths.map((p) => p.name);
  const duplicate = names.find((name, i) => names.indexOf(name) !== i);
  if (duplicate) throw new Error(`two history paths are named ${duplicate}`);
  log(
    `recording ${historyPaths.length} histories into test/histories/${generation.name}/` +
      (generation.replaces ? `, replacing ${generation.replaces}/` : ', a new generation') +
      ` (workflow code ${codeHash.sha256.slice(0, 12)})`,
  );

  Runtime.install({ logger: new DefaultLogger('WARN') });
  // PostgreSQL refuses to run as root; the OS user it runs as must be able to enter this folder.
  await chmod(dataDir, 0o711);
  const stack = await startChargeguardStack({ dataDir, temporalUiPort: null });
  const pool = createLedgerPool({ databaseUrl: stack.databaseUrl });
  let nativeConnection: NativeConnection | undefined;
  let connection: Connection | undefined;
  let recorded: Recorded[];
  let simulator: StripeSimulator | undefined;
  const bundlePath = join(dataDir, 'workflow-bundle.js');
  try {
    nativeConnection = await NativeConnection.connect({ address: stack.temporalAddress });
    connection = await Connection.connect({ address: stack.temporalAddress });
    const temporal = new Client({ connection, namespace: 'default' });
    await migrateLedger(stack.migrationDatabaseUrl);
    // The bundle the worker runs is the one the recordings are checked against below.
    await writeFile(bundlePath, (await bundleChargeWorkflows()).code);
    const suffix = randomBytes(4).toString('hex');
    const tenant = `history-${suffix}`;
    const taskQueue = `record-histories-${suffix}`;
    const stepHooks = new Map<string, () => void | Promise<void>>();
    const commitHooks = new Map<string, () => void | Promise<void>>();
    // The provider of the recorded provider charges: the stateful simulator, through the official SDK.
    const sim = await StripeSimulator.start({ port: 0 });
    simulator = sim;
    const stripe = new StripeConnector({ apiKey: 'sk_test_recorder', webhookSecrets: ['whsec_recorder'], endpoint: sim.endpoint, maxNetworkRetries: 0, requestTimeoutMs: 2_000 });
    const workerOn = (queue: string) =>
      createChargeWorker({
        connection: nativeConnection!,
        namespace: 'default',
        ledger: pool,
        taskQueue: queue,
        workflowBundle: { codePath: bundlePath },
        // The hold sweeper's activities ask this client whether charge workflows run. No schedule:
        // the sweeps recorded are started by their paths, scoped to tenants of their own.
        temporal,
        holdSweeper: false,
        // Recorded in clear, as every committed history is: the replay tests read them without keys.
        payloadProtection: { ring: null, plaintext: 'accept' },
        providers: { stripe },
        hooks: {
          async beforeStep(step, stepTenant, key) {
            if (stepTenant === tenant) await stepHooks.get(`${step}:${key}`)?.();
          },
          async afterCommit(step, stepTenant, key) {
            if (stepTenant === tenant) await commitHooks.get(`${step}:${key}`)?.();
          },
        },
      });
    const worker = await workerOn(taskQueue);
    const policy: ChargePolicy = { activityStartToCloseMs: 5_000, tryBudgetMs: 30_000, confirmBudgetMs: 30_000, holdTtlMs: 60_000, ledgerRetryMaxIntervalMs: 500 };
    const ctx: RecordingContext = {
      tenant,
      taskQueue,
      temporal,
      ledger: pool,
      policy,
      client: (overrides = {}, queue = taskQueue) =>
        new ChargeService({
          temporal,
          ledger: pool,
          policy: { ...policy, ...overrides },
          amountMinorMax: 1e12,
          waitBudgetMs: 60_000,
          taskQueue: queue,
        }),
      async withLateWorker(start, finish) {
        const lateQueue = `${taskQueue}-late-${randomBytes(3).toString('hex')}`;
        const started = await start(lateQueue);
        // The scenario itself, not a synchronisation: the task must wait past the heartbeat deadline.
        await delay(lateWorkerDelayMs);
        const late = await workerOn(lateQueue);
        return late.runUntil(finish(started));
      },
      body: (amountMinor, capture = 'automatic') => ({
        order_id: `order-${amountMinor}`,
        payer_account_id: 'payer',
        payee_account_id: 'payee',
        amount: amountMinor,
        currency: 'USD',
        capture,
      }),
      onStep: (step: LedgerStep, key: string, hook) => void stepHooks.set(`${step}:${key}`, hook),
      onCommit: (step: LedgerStep, key: string, hook) => void commitHooks.set(`${step}:${key}`, hook),
      sim,
      async ownTenant(label) {
        const own = `${tenant}-${label}`.toLowerCase().replace(/[^a-z0-9_-]/g, '-').slice(0, 64);
        await createAccount(pool, { tenant: own, id: 'payer', currency: 'USD', allowOverdraft: false });
        await createAccount(pool, { tenant: own, id: 'payee', currency: 'USD', allowOverdraft: false });
        await deposit(pool, own, 'payer', 10_000_000, 'opening');
        return own;
      },
    };
    await createAccount(pool, { tenant, id: 'payer', currency: 'USD', allowOverdraft: false });
    await createAccount(pool, { tenant, id: 'payee', currency: 'USD', allowOverdraft: false });
    await deposit(pool, tenant, 'payer', 10_000_000, 'opening');

    recorded = await worker.runUntil(async () => {
      const startedMs = Date.now();
      // Every path has keys of its own, so they run side by side: the slow ones (timers, a
      // workflow task heartbeat) then cost their own time once, not the sum.
      const concurrency = pathConcurrency();
      let running = 0;
      const waiting: (() => void)[] = [];
      const slot = async (): Promise<void> => {
        if (running < concurrency) {
          running += 1;
          return;
        }
        await new Promise<void>((resolve) => waiting.push(resolve));
      };
      const release = (): void => {
        const next = waiting.shift();
        if (next) next();
        else running -= 1;
      };
      const outcomes = await Promise.allSettled(
        historyPaths.map(async (path) => {
          await slot();
          try {
            const ref = await withDeadline(path.name, pathDeadlineMs, () => path.record(ctx, path.name));
            const handle = temporal.workflow.getHandle(ref.workflowId, ref.runId, { followRuns: false });
            return { path, ref, history: await handle.fetchHistory() };
          } finally {
            release();
          }
        }),
      );
      const failed = outcomes.flatMap((o, i) =>
        o.status === 'rejected' ? [`${historyPaths[i]!.name}: ${o.reason instanceof Error ? o.reason.message : String(o.reason)}`] : [],
      );
      if (failed.length > 0) throw new Error(`these paths could not be recorded:\n${failed.join('\n')}`);
      log(`ran ${historyPaths.length} paths in ${Date.now() - startedMs} ms`);
      return outcomes.map((o) => (o as PromiseFulfilledResult<Recorded>).value);
    });
  } finally {
    await simulator?.stop();
    await connection?.close();
    await nativeConnection?.close();
    await pool.end();
    await stack.stop();
  }

  const problems = recorded.flatMap(problemsOf);
  // A recording the code that made it cannot replay: the workflow code is not deterministic.
  problems.push(
    ...(await replayFailures(
      bundlePath,
      recorded.map(({ path, ref, history }) => ({ label: path.name, workflowId: ref.workflowId, history })),
    )),
  );
  if (problems.length > 0) {
    log(`nothing written; the recordings are not usable:\n${problems.join('\n')}`);
    return 1;
  }

  if (generation.replaces !== null) await rm(join(historiesDir, generation.replaces), { recursive: true, force: true });
  const dir = join(historiesDir, generation.name);
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  const entries: HistoryEntry[] = [];
  for (const { path, ref, history } of recorded) {
    const file = `${generation.name}/${path.name}.history.pb`;
    await writeFile(join(historiesDir, file), encodeHistory(history));
    const entry: HistoryEntry = {
      file,
      path: path.name,
      about: path.about,
      workflowType: workflowTypeOf(history),
      workflowId: ref.workflowId,
      patches: patchMarkers(history),
      events: history.events?.length ?? 0,
    };
    entries.push(entry);
    log(`recorded ${file} (${entry.events} events, patches ${JSON.stringify(entry.patches)})`);
  }
  const written: Generation = {
    name: generation.name,
    recordedAt: new Date().toISOString(),
    recordedFrom: commit,
    codeHash,
    requiredPatches,
    histories: entries,
  };
  const kept = manifest.generations.filter((g) => g.name !== generation.name && g.name !== generation.replaces);
  await writeManifest({ about: manifestAbout, generations: [...kept, written] });
  log(`wrote test/histories/manifest.json (${kept.length} older generation${kept.length === 1 ? '' : 's'} kept)`);

  // The older generations are what in-flight executions look like to the code just recorded.
  const older = await Promise.all(
    kept.flatMap((g) =>
      g.histories.map(async (entry) => ({ label: entry.file, workflowId: entry.workflowId, history: await readHistory(entry) })),
    ),
  );
  const broken = await replayFailures(bundlePath, older);
  if (broken.length > 0) {
    log(
      `\nolder histories no longer replay on this code: executions in flight would break on deployment.\n` +
        `Put the change behind patched() (docs/deploying-workflow-changes.md); do not delete these histories.\n${broken.join('\n')}`,
    );
    return 1;
  }
  log(`${older.length} older histories still replay on this code`);
  return 0;
}

// Exit explicitly: with only exitCode set, a run whose older histories broke still exited 0.
process.exit(await main());
