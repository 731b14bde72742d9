/**
 * Where the idle latency of one charge (P5) goes. Not part of `npm run bench`: run it with
 * `npx tsx bench/experiments/idle-latency-profile.ts [--samples=N] [pragma ...]` on a quiet
 * machine. On a fresh bench stack (dev server pragmas from the arguments, default journal_mode=WAL)
 * and an in-process worker with eager start, it times one call at a time, each `samples` times,
 * from the cheapest call to the full charge, so each step's cost is the difference between two rows:
 *   gRPC round trip (getSystemInfo) -> a start with no worker (one write) -> an empty workflow
 *   (start + one workflow task + result) -> the bare 3-local-activity workflow -> ChargeWorkflow
 *   started directly -> the same with each option of the service's start request added ->
 *   ChargeService.charge (validation, account check, start, wait)
 * and, ledger only, the service's two reads and Try then Confirm. The rows from the bare workflow to
 * ChargeService.charge run interleaved, so their differences are not a drift of the machine; for
 * the traced ones a table splits each call into stages from its RPCs and ledger queries (and counts
 * them, and whether the server took the eager start), recorded by wrapping the client's
 * workflowService and a ledger pool here, so the product code runs unchanged.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultSqlitePragmas } from '../../src/stack/temporal-dev-server.js';
import { confirmHold, readCharge, tryHold } from '../../src/ledger/charges.js';
import { getAccountCurrencies } from '../../src/ledger/accounts.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { chargeWorkflowType } from '../../workflows/definitions.js';
import { baselineWorkflowType, emptyWorkflowType, type BaselineInput } from '../baseline-workflow.js';
import { startBenchStack } from '../lib/bench-stack.js';
import { chargeBody } from '../lib/charging.js';
import { openPopulation, spreadPicker } from '../lib/population.js';
import { benchPolicy } from '../lib/session.js';
import { openInProcessSession } from './in-process-charges.js';
import { summariseLatencies } from '../lib/stats.js';
import { takeCpuSnapshot } from '../lib/cpu.js';
import { ledgerIntent } from '../scenarios/ledger-only.js';
import { ChargeService } from '../../src/service/charge-service.js';
import { limits } from '../../src/domain/limits.js';
import type { ChargeMemo } from '../../workflows/definitions.js';
import { startSearchAttributes } from '../../workflows/search-attributes.js';
import { defaultWorkflowTaskTimeoutMs } from '../../workflows/task-timeouts.js';
import type { Client } from '@temporalio/client';
import type pg from 'pg';

const samplesArg = process.argv.slice(2).find((a) => a.startsWith('--samples='));
const samples = samplesArg ? Number(samplesArg.slice('--samples='.length)) : 300;
const warmup = 30;
const pragmaArgs = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const pragmas = pragmaArgs.length > 0 ? pragmaArgs : [...defaultSqlitePragmas];

/**
 * What one call did on the wire, in order: every Temporal RPC and every ledger query, with start
 * and end relative to the call's start. Recorded by wrapping the client's workflowService and the
 * ledger pool's `query` in this experiment only, so the product code runs unchanged.
 */
interface WireEvent {
  kind: 'rpc' | 'sql';
  name: string;
  startMs: number;
  endMs: number;
  /** startWorkflowExecution only: whether the server handed the first workflow task back (eager). */
  eager?: boolean;
}

class WireTrace {
  private origin = 0;
  private events: WireEvent[] | null = null;

  begin(): void {
    this.origin = performance.now();
    this.events = [];
  }

  end(): WireEvent[] {
    const events = this.events ?? [];
    this.events = null;
    return events;
  }

  async record<T>(kind: WireEvent['kind'], name: string, call: () => Promise<T>, eager?: (result: T) => boolean): Promise<T> {
    const events = this.events;
    if (events === null) return call();
    const startMs = performance.now() - this.origin;
    const result = await call();
    events.push({ kind, name, startMs, endMs: performance.now() - this.origin, ...(eager ? { eager: eager(result) } : {}) });
    return result;
  }

  /** Wraps the service's RPC methods in place: the client reads `connection.workflowService` on every call. */
  traceTemporal(client: Client): void {
    const service = client.workflowService as unknown as Record<string, (request: unknown) => Promise<unknown>>;
    for (const name of ['startWorkflowExecution', 'getWorkflowExecutionHistory', 'describeWorkflowExecution', 'queryWorkflow', 'getSystemInfo']) {
      const original = service[name]!.bind(service);
      service[name] = (request) =>
        this.record('rpc', name, () => original(request), name === 'startWorkflowExecution'
          ? (response) => (response as { eagerWorkflowTask?: unknown }).eagerWorkflowTask != null
          : undefined);
    }
  }

  traceLedger(pool: pg.Pool): void {
    const original = pool.query.bind(pool) as (...args: unknown[]) => Promise<unknown>;
    (pool as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = (...args: unknown[]) =>
      this.record('sql', String(typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string }).text).slice(0, 40), () => original(...args));
  }
}

/** Per-stage durations of one call, from its wire events (ms), and what it sent. */
function stagesOf(events: WireEvent[], totalMs: number): Record<string, number> {
  const sql = events.filter((e) => e.kind === 'sql');
  const start = events.find((e) => e.name === 'startWorkflowExecution');
  const history = events.filter((e) => e.name === 'getWorkflowExecutionHistory');
  const stages: Record<string, number> = {};
  if (start) stages['before the start RPC'] = start.startMs;
  if (sql.length > 0) stages['of which ledger reads (parallel)'] = Math.max(...sql.map((e) => e.endMs)) - Math.min(...sql.map((e) => e.startMs));
  if (start) stages['start RPC'] = start.endMs - start.startMs;
  if (history.length > 0) {
    const first = history[0]!;
    const last = history[history.length - 1]!;
    stages['start to result poll'] = first.startMs - (start?.endMs ?? 0);
    stages['result long poll(s)'] = last.endMs - first.startMs;
    stages['after the result (decode, reply)'] = totalMs - last.endMs;
  }
  stages['RPCs'] = events.filter((e) => e.kind === 'rpc').length;
  stages['history RPCs'] = history.length;
  stages['SQL queries'] = sql.length;
  stages['eager start taken'] = start?.eager ? 1 : 0;
  return stages;
}

const dataDir = join(tmpdir(), `chargeguard-profile-${process.pid}`);
const stack = await startBenchStack({ dataDir, sqlitePragmas: pragmas, keepData: false, log: (l) => console.error(l) });
const rows: { step: string; p50Ms: number; p90Ms: number; p99Ms: number; cpuMs: number; temporalCpuMs: number; interleaved: boolean }[] = [];
const stageRows: { step: string; stages: Map<string, number[]> }[] = [];
const trace = new WireTrace();
try {
  const session = await openInProcessSession(stack, dataDir, 'profile');
  const ledger = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 4 });
  try {
    const population = await openPopulation(ledger, { tenant: 'profile', payers: 2_000, payees: 200 });
    const payer = spreadPicker(population.payers);
    const payee = spreadPicker(population.payees);
    const t = session.temporal;
    const cpuSubjects = { temporal: stack.serverPids.temporal, postgres: null, worker: null };
    trace.traceTemporal(t);
    const eager = { requestEagerStart: true } as const;

    interface Step {
      step: string;
      run: (n: number) => Promise<unknown>;
      /** Record the call's wire events and report its stages. */
      traced?: boolean;
    }
    /**
     * Times the steps one call at a time, interleaved: sample n runs every step once, the order
     * rotating each sample, so a drift of the machine or of the growing dev server during the
     * measurement falls on every step alike and their differences stay comparable. CPU is this
     * process's (load side and in-process worker) and the Temporal server's during the step's
     * calls; the server's is read from /proc in 10 ms ticks, so only its mean over many calls means
     * anything.
     */
    async function time(...steps: Step[]): Promise<void> {
      for (let n = 0; n < warmup; n++) for (const s of steps) await s.run(1_000_000 + n);
      const latencies = steps.map((): number[] => []);
      const cpuMs = steps.map(() => 0);
      const temporalCpuMs = steps.map(() => 0);
      const stages = steps.map(() => new Map<string, number[]>());
      for (let n = 0; n < samples; n++) {
        for (let k = 0; k < steps.length; k++) {
          const i = (n + k) % steps.length;
          const s = steps[i]!;
          if (s.traced) trace.begin();
          const cpuBefore = await takeCpuSnapshot(cpuSubjects);
          const startedAt = performance.now();
          await s.run(n);
          const latencyMs = performance.now() - startedAt;
          const cpuAfter = await takeCpuSnapshot(cpuSubjects);
          cpuMs[i]! += 1000 * (cpuAfter.secondsBy.bench! - cpuBefore.secondsBy.bench!);
          temporalCpuMs[i]! += 1000 * ((cpuAfter.secondsBy.temporal ?? Number.NaN) - (cpuBefore.secondsBy.temporal ?? Number.NaN));
          latencies[i]!.push(latencyMs);
          if (s.traced) {
            for (const [stage, ms] of Object.entries(stagesOf(trace.end(), latencyMs))) {
              stages[i]!.set(stage, [...(stages[i]!.get(stage) ?? []), ms]);
            }
          }
        }
      }
      steps.forEach((s, i) => {
        const { p50Ms, p90Ms, p99Ms } = summariseLatencies(latencies[i]!);
        rows.push({ step: s.step, p50Ms, p90Ms, p99Ms, cpuMs: cpuMs[i]! / samples, temporalCpuMs: temporalCpuMs[i]! / samples, interleaved: steps.length > 1 });
        if (s.traced) stageRows.push({ step: s.step, stages: stages[i]! });
        console.error(`${s.step}: p50 ${p50Ms.toFixed(1)} ms`);
      });
    }
    const baselineInput = (key: string, localActivities: boolean): BaselineInput => ({
      payload: { intent: session.charges.buildIntent(population.tenant, key, chargeBody(key, payer(0), payee(0))), policy: benchPolicy },
      localActivities,
    });

    await time({ step: 'gRPC round trip (getSystemInfo)', run: () => t.workflowService.getSystemInfo({}) });
    await time({ step: 'start, no worker (one write)', run: (n) =>
      t.workflow.start(emptyWorkflowType, { taskQueue: 'profile-nobody', workflowId: `nobody-${n}`, args: [baselineInput(`nobody-${n}`, false)] }) });
    await time({ step: 'empty workflow, eager (start + 1 task + result)', run: (n) =>
      t.workflow.execute(emptyWorkflowType, { taskQueue: 'profile-baseline', workflowId: `empty-${n}`, args: [baselineInput(`e-${n}`, false)], ...eager }) });
    await time({ step: 'empty workflow, no eager start', run: (n) =>
      t.workflow.execute(emptyWorkflowType, { taskQueue: 'profile-baseline', workflowId: `empty-q-${n}`, args: [baselineInput(`eq-${n}`, false)] }) });
    const directIntent = (key: string, n: number) =>
      session.charges.buildIntent(population.tenant, key, chargeBody(key, payer(n), payee(n)));
    // The start request ChargeService sends differs from the direct one by these options; each row
    // adds them, so a difference between the direct row and the service's is priced here or not at all.
    type StartExtras = 'memo' | 'search attributes' | 'id policies and task timeout';
    const startWith = async (prefix: string, n: number, extras: readonly StartExtras[]) => {
      const key = `${prefix}-${n}`;
      const intent = directIntent(key, n);
      const handle = await t.workflow.start(chargeWorkflowType, {
        taskQueue: 'profile-charges', workflowId: `charge/${population.tenant}/${key}`, args: [{ intent, policy: benchPolicy }], ...eager,
        ...(extras.includes('memo') ? { memo: { fingerprint: intent.fingerprint } satisfies ChargeMemo } : {}),
        ...(extras.includes('search attributes') ? { typedSearchAttributes: startSearchAttributes(intent) } : {}),
        ...(extras.includes('id policies and task timeout')
          ? { workflowIdReusePolicy: 'REJECT_DUPLICATE', workflowIdConflictPolicy: 'FAIL', workflowTaskTimeout: defaultWorkflowTaskTimeoutMs } as const
          : {}),
      });
      return handle.result();
    };
    // The same service as the session's, on a ledger pool of its own whose queries the trace sees.
    const tracedLedger = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 16 });
    trace.traceLedger(tracedLedger);
    try {
      const service = new ChargeService({
        temporal: t, ledger: tracedLedger, policy: benchPolicy, amountMinorMax: limits.amountMinorMaxDefault,
        waitBudgetMs: 30_000, taskQueue: 'profile-charges', eagerWorkflowStart: session.eagerStart,
      });
      await time(
        { step: 'bare 3-local-activity workflow, eager', run: (n) =>
          t.workflow.execute(baselineWorkflowType, { taskQueue: 'profile-baseline', workflowId: `bare-${n}`, args: [baselineInput(`b-${n}`, true)], ...eager }) },
        { step: 'ChargeWorkflow started directly, eager (execute)', traced: true, run: (n) => {
          const key = `direct-${n}`;
          return t.workflow.execute(chargeWorkflowType, {
            taskQueue: 'profile-charges', workflowId: `charge/${population.tenant}/${key}`, args: [{ intent: directIntent(key, n), policy: benchPolicy }], ...eager,
          });
        } },
        { step: '  + memo (start, then result())', traced: true, run: (n) => startWith('memo', n, ['memo']) },
        { step: '  + search attributes', traced: true, run: (n) => startWith('sa', n, ['memo', 'search attributes']) },
        { step: '  + id policies, task timeout (the service\'s start request)', traced: true, run: (n) =>
          startWith('all', n, ['memo', 'search attributes', 'id policies and task timeout']) },
        { step: 'ChargeService.charge (full path), eager', traced: true, run: (n) => {
          const key = `client-${n}`;
          return service.charge(population.tenant, key, chargeBody(key, payer(n + 500), payee(n)));
        } },
      );
      await time({ step: 'its intent alone (validation, fingerprint)', run: async (n) => {
        const key = `intent-${n}`;
        return service.buildIntent(population.tenant, key, chargeBody(key, payer(n), payee(n)));
      } });
    } finally {
      await tracedLedger.end();
    }
    // The account check's query, as it was (the balances view) and as it is (the accounts table):
    // the same two accounts, interleaved.
    const accountIds = (n: number) => [payer(n), payee(n)];
    await time(
      { step: 'ledger only: account check on account_balances', run: (n) =>
        ledger.query('SELECT * FROM account_balances WHERE tenant = $1 AND id = ANY($2::text[]) AND NOT is_system', [population.tenant, accountIds(n)]) },
      { step: 'ledger only: account check (getAccountCurrencies)', run: (n) => getAccountCurrencies(ledger, population.tenant, accountIds(n)) },
      { step: 'ledger only: readCharge', run: (n) => readCharge(ledger, population.tenant, `client-${n}`) },
      { step: 'ledger only: both at once, as the service reads', run: (n) =>
        Promise.all([readCharge(ledger, population.tenant, `client-${n}`), getAccountCurrencies(ledger, population.tenant, accountIds(n))]) },
    );
    await time({ step: 'ledger only: Try then Confirm', run: async (n) => {
      const key = `ledger-${n}`;
      await tryHold(ledger, ledgerIntent(population.tenant, key, payer(n + 1_000), payee(n)), benchPolicy.holdTtlMs);
      await confirmHold(ledger, population.tenant, key, null);
    } });
  } finally {
    await ledger.end();
    await session.close();
  }
} finally {
  await stack.stop();
}
console.log(`\nIdle latency, one call at a time, ${samples} samples each; dev server pragmas [${pragmas.join(', ')}]\n`);
console.log('Rows marked * were measured interleaved with each other (sample by sample, order rotating).');
console.log('CPU per call: this process (load side and in-process worker) and the Temporal server; PostgreSQL not included.\n');
console.log('| step | p50 | p90 | p99 | CPU/call here | Temporal CPU/call |\n|---|---:|---:|---:|---:|---:|');
for (const r of rows) {
  console.log(`| ${r.step}${r.interleaved ? ' *' : ''} | ${r.p50Ms.toFixed(2)} ms | ${r.p90Ms.toFixed(1)} ms | ${r.p99Ms.toFixed(1)} ms | ${r.cpuMs.toFixed(2)} ms | ${r.temporalCpuMs.toFixed(2)} ms |`);
}
console.log('\nPer stage, traced rows: p50 of each stage over the samples (ms); counts are means per call\n');
const isCount = (name: string): boolean => name === 'RPCs' || name === 'history RPCs' || name === 'SQL queries' || name.startsWith('eager');
const stageNames = [...new Set(stageRows.flatMap((r) => [...r.stages.keys()]))];
console.log(`| step | ${stageNames.join(' | ')} |\n|---|${stageNames.map(() => '---:').join('|')}|`);
for (const r of stageRows) {
  const cells = stageNames.map((name) => {
    const values = r.stages.get(name);
    if (!values) return '';
    const summary = summariseLatencies(values);
    return isCount(name) ? summary.meanMs.toFixed(2) : summary.p50Ms.toFixed(1);
  });
  console.log(`| ${r.step} | ${cells.join(' | ')} |`);
}
