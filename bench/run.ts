import { writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';
import { fileURLToPath } from 'node:url';
import { step } from '../src/support/progress.js';
import { createLedgerPool } from '../src/ledger/pool.js';
import { bundleChargeWorkflows, quietBundlerLogger } from '../src/worker/charge-worker.js';
import { startBenchStack, type TemporalKind } from './lib/bench-stack.js';
import { fullSettings, quickSettings, type BenchContext } from './lib/context.js';
import { loadAverage1m, machineInfo, softwareVersions, waitForQuietMachine } from './lib/machine.js';
import { detectLedgerStepKind } from './lib/charge-shape.js';
import { seedLedgerHistory } from './lib/history.js';
import { settleDisk } from './lib/settle.js';
import { openTemporalSession, type SessionOptions } from './lib/session.js';
import type { Verification } from './lib/verify.js';
import type { WorkerTuning } from './lib/workers.js';
import { buildFigures, type BenchResult, type ServerRun } from './report/result.js';
import { runM1 } from './scenarios/m1-memory.js';
import { p1ProviderConcurrency, runP1Provider } from './scenarios/p1-provider.js';
import { measureThroughputPoint, runP1 } from './scenarios/p1-throughput.js';
import { runP1Webhook } from './scenarios/p1-webhook.js';
import { runP2 } from './scenarios/p2-ledger.js';
import { runP4EndToEnd, runP4Ledger } from './scenarios/p4-hot-payee.js';
import { runLatencyScenarios } from './scenarios/p5-p3-latency.js';
import { runScaleOut } from './scenarios/scale-out.js';
import { pgbenchVersion } from './scenarios/tpcb.js';
import { defaultVariants, runVariants } from './scenarios/variants.js';

export const scenarioIds = ['p1', 'p1-webhook', 'p1-provider', 'p2', 'p3', 'p4', 'p5', 'm1', 'variants'] as const;
/**
 * Finer selectors for --only, for iterating on one layer: P4 has a ledger-only and an end-to-end
 * half; scale-out (cluster only) also runs whenever P1 does.
 */
export const extraSelectors = ['p4-ledger', 'p4-e2e', 'scale-out'] as const;
export type ScenarioId = (typeof scenarioIds)[number] | (typeof extraSelectors)[number];

export interface BenchOptions {
  quick: boolean;
  scenarios: ReadonlySet<ScenarioId>;
  placement: 'in-process' | 'process';
  /**
   * The Temporal servers P1, P3 and P5 run on, each fresh, in this order. The first is the primary:
   * P4 end to end and M1 run on it alone, and its figures fill the figures table. Variants need
   * the dev server.
   */
  temporalKinds: readonly TemporalKind[];
  sqlitePragmas: string[];
  eagerStart: boolean;
  tuning: WorkerTuning;
  /** The baseline's activities; 'mirror' (the fair default) uses the kind ChargeWorkflow is seen to use. */
  baselineActivityKind: 'local' | 'remote' | 'mirror';
  maxLoad: number;
  loadWaitMs: number;
  dataDir: string;
  keepData: boolean;
  label: string | null;
  /** Measured seconds of each load phase instead of the settings' (longer phases, tighter ratios). */
  phaseSeconds: number | null;
  /** P1-provider: the simulator's fixed delay before each API request, milliseconds. */
  providerLatencyMs: number;
}

/** Worker settings as `chargeguard start` runs them (createChargeWorker's defaults). */
export const defaultTuning: WorkerTuning = {
  maxConcurrentWorkflowTaskExecutions: 100,
  maxConcurrentActivityTaskExecutions: 100,
  maxCachedWorkflows: 100,
  ledgerPoolMaxConnections: 20,
};

const baselineWorkflowsPath = fileURLToPath(new URL('./baseline-workflow.ts', import.meta.url));

/** Runs the selected scenarios on one stack and returns everything measured (nothing written yet). */
export async function runBench(options: BenchOptions): Promise<BenchResult> {
  const startedAt = new Date();
  const runId = startedAt.toISOString().replace(/[-:]/g, '').slice(2, 13).toLowerCase();
  const log = (line: string): void => void process.stderr.write(`${line}\n`);
  const preset = options.quick ? quickSettings : fullSettings;
  const settings = options.phaseSeconds === null
    ? preset
    : { ...preset, durationMs: options.phaseSeconds * 1000, p4EndToEndDurationMs: options.phaseSeconds * 1000 };
  const quiet = await waitForQuietMachine(options.maxLoad, options.loadWaitMs, log);
  const dataDir = resolve(options.dataDir, runId);
  const [primaryKind, ...otherKinds] = options.temporalKinds;
  if (primaryKind === undefined) throw new Error('no Temporal server to run on');
  const stack = await step('starting PostgreSQL and Temporal for the bench', () =>
    startBenchStack({ dataDir, sqlitePragmas: options.sqlitePragmas, temporalKind: primaryKind, keepData: options.keepData, log }),
  );
  // Generous statement timeout: verification scans the whole ledger and is never what is measured.
  const ledger = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 8, statementTimeoutMs: 600_000 });
  const ctx: BenchContext = { runId, settings, stack, ledger, log };
  const partial: Omit<BenchResult, 'figures' | 'correct' | 'problems' | 'finishedAt' | 'load'> & Partial<BenchResult> = {
    runId,
    label: options.label,
    quick: options.quick,
    startedAt: startedAt.toISOString(),
    machine: machineInfo(),
    versions: await softwareVersions(stack.databaseUrl, await pgbenchVersion()),
    setup: {
      placement: options.placement,
      sqlitePragmas: stack.sqlitePragmas,
      eagerStart: options.eagerStart,
      baselineActivityKind: options.baselineActivityKind === 'mirror' ? 'remote' : options.baselineActivityKind,
      ledgerStepKind: null,
      tuning: options.tuning,
      external: { temporal: stack.temporalExternal, database: Boolean(process.env.DATABASE_URL?.trim()) },
      temporalKind: primaryKind,
    },
    settings,
  };
  const has = (id: ScenarioId): boolean => options.scenarios.has(id);
  let baselineLocal = options.baselineActivityKind === 'local';
  let stepKindSeen = false;
  try {
    const bundles = await step('bundling the charge and baseline workflows', async () => {
      const chargeBundlePath = join(dataDir, 'charge-workflows.js');
      const baselineBundlePath = join(dataDir, 'baseline-workflows.js');
      await writeFile(chargeBundlePath, (await bundleChargeWorkflows()).code);
      const baseline = await bundleWorkflowCode({ workflowsPath: baselineWorkflowsPath, logger: quietBundlerLogger });
      await writeFile(baselineBundlePath, baseline.code);
      return { chargeBundlePath, baselineBundlePath };
    });
    const base = { tuning: options.tuning, eagerStart: options.eagerStart, bundles };

    await step('giving the fresh ledger some history and statistics', () => seedLedgerHistory(ctx, settings.historyCharges));
    // Ledger-only scenarios first, with no worker running: they measure PostgreSQL alone, so once for all servers.
    if (has('p2')) partial.p2 = await runP2(ctx);
    if (has('p4') || has('p4-ledger')) partial.p4Ledger = await runP4Ledger(ctx);

    const servers: ServerRun[] = [];
    for (const kind of options.temporalKinds) {
      const primary = kind === primaryKind;
      // Later servers share the run's ledger: their tenants, task queues and workflow ids get the kind in their names.
      const serverCtx: BenchContext = primary ? ctx : { ...ctx, runId: `${runId}-${kind}` };
      if (!primary) await step(`replacing the Temporal server by a fresh ${kind}`, () => stack.switchTemporal(kind));
      const server: ServerRun = { kind, temporal: stack.temporalDescription, ledgerStepKind: null };
      servers.push(server);

      const e2e = primary && (has('p4') || has('p4-e2e'));
      const webhook = primary && has('p1-webhook');
      if (has('p1') || has('p3') || has('p5') || e2e || webhook) {
        const sessionOptions: SessionOptions = {
          ...base,
          placement: options.placement,
          chargeTaskQueue: `bench-${serverCtx.runId}-charges`,
          baselineTaskQueue: `bench-${serverCtx.runId}-baseline`,
          // The deliverer runs beside the workers, as a deployed worker runs it: P1 and the others
          // carry its polling with no endpoint, P1-webhook its deliveries.
          webhookDelivery: true,
        };
        await settleDisk(serverCtx);
        const session = await step(`starting the workers (${options.placement}, ${kind})`, () => openTemporalSession(stack, sessionOptions));
        try {
          const stepKind = await detectLedgerStepKind(serverCtx, session);
          const serverBaselineLocal = options.baselineActivityKind === 'mirror' ? stepKind === 'local' : baselineLocal;
          server.ledgerStepKind = stepKind;
          if (primary) {
            baselineLocal = serverBaselineLocal;
            stepKindSeen = true;
            partial.setup.ledgerStepKind = stepKind;
            partial.setup.baselineActivityKind = baselineLocal ? 'local' : 'remote';
          }
          if (has('p1')) {
            server.p1 = await runP1(serverCtx, session, { scenario: 'p1', concurrency: settings.p1Concurrency, baselineLocalActivities: serverBaselineLocal });
          }
          if (webhook) {
            partial.p1Webhook = await step(`P1 with one webhook endpoint (${kind})`, () =>
              runP1Webhook(serverCtx, session, { concurrency: settings.p1Concurrency, baselineLocalActivities: serverBaselineLocal }),
            );
          }
          if (has('p5') || has('p3')) {
            const peak = server.p1
              ? Math.max(...server.p1.points.map((p) => p.charge.operationsPerSecond))
              : await probePeak(serverCtx, session, serverBaselineLocal);
            const barePeak = server.p1 ? Math.max(...server.p1.points.map((p) => p.baseline.operationsPerSecond)) : null;
            const { p5, p3 } = await runLatencyScenarios(serverCtx, session, peak, barePeak);
            server.p5 = p5;
            server.p3 = p3;
          }
          if (e2e) partial.p4EndToEnd = await runP4EndToEnd(serverCtx, session);
        } finally {
          await session.close();
        }
      }
      if (primary) {
        if (server.p1) partial.p1 = server.p1;
        if (server.p3) partial.p3 = server.p3;
        if (server.p5) partial.p5 = server.p5;
      }
      if (kind === 'cluster' && !stack.temporalExternal && (has('p1') || has('scale-out'))) {
        await settleDisk(serverCtx);
        partial.scaleOut = await step('scale-out on the cluster: 1 worker process, then 2', () => runScaleOut(serverCtx, base, partial.machine.cores));
      }
      if (primary && has('m1')) {
        await settleDisk(ctx);
        partial.m1 = await runM1(ctx, base);
      }
      if (has('p1-provider') && kind === 'dev') {
        await settleDisk(serverCtx);
        partial.p1Provider = await step(`P1 with a provider in the loop (${options.providerLatencyMs} ms per provider request, ${kind})`, () =>
          runP1Provider(serverCtx, {
            ...base,
            placement: options.placement,
            chargeTaskQueue: `bench-${serverCtx.runId}-provider-charges`,
            baselineTaskQueue: `bench-${serverCtx.runId}-provider-baseline`,
          }, { providerLatencyMs: options.providerLatencyMs, concurrency: p1ProviderConcurrency }),
        );
      }
      if (has('variants') && stack.temporalKind === 'dev') {
        partial.variants = await runVariants(
          ctx,
          base,
          defaultVariants,
          options.baselineActivityKind === 'mirror' && !stepKindSeen ? 'mirror' : baselineLocal,
        );
      }
    }
    if (has('p1-provider') && !options.temporalKinds.includes('dev')) log('p1-provider skipped: it runs on the dev server, and --temporal has no dev');
    if (has('variants') && !options.temporalKinds.includes('dev')) log('variants skipped: they vary the dev server, and --temporal has no dev');
    if (has('scale-out') && (!options.temporalKinds.includes('cluster') || stack.temporalExternal)) {
      log('scale-out skipped: it runs on the cluster, and --temporal has no cluster');
    }
    if (otherKinds.length > 0) partial.servers = servers;
  } finally {
    await ledger.end();
    await stack.stop();
  }
  const withoutFigures = {
    ...partial,
    finishedAt: new Date().toISOString(),
    load: { beforeRun1m: quiet.load, waitedMs: quiet.waitedMs, quietAtStart: quiet.quiet, afterRun1m: loadAverage1m() },
  } as Omit<BenchResult, 'figures' | 'correct' | 'problems'>;
  const problems = collectProblems(withoutFigures);
  return { ...withoutFigures, figures: buildFigures(withoutFigures), correct: problems.length === 0, problems };
}

/** P5's half load needs a peak; without P1 in the run, one P1 point at the variant concurrency gives it. */
async function probePeak(ctx: BenchContext, session: Awaited<ReturnType<typeof openTemporalSession>>, baselineLocal: boolean): Promise<number> {
  const { openPopulation } = await import('./lib/population.js');
  const { ChargeTally } = await import('./lib/charging.js');
  const population = await openPopulation(ctx.ledger, { tenant: `bench-${ctx.runId}-peak`, payers: 2_000, payees: 200 });
  const point = await measureThroughputPoint(ctx, session, population, new ChargeTally(), {
    label: 'peak probe',
    concurrency: ctx.settings.variantConcurrency,
    baselineLocalActivities: baselineLocal,
  });
  return point.charge.operationsPerSecond;
}

function collectProblems(result: Omit<BenchResult, 'figures' | 'correct' | 'problems'>): string[] {
  const checks: [string, Pick<Verification, 'ok' | 'problems'> | undefined][] = [
    ['P1', result.p1?.verification],
    ['P1-webhook', result.p1Webhook?.verification],
    ['P1-webhook, deliveries', result.p1Webhook && { ok: result.p1Webhook.deliveryProblems.length === 0, problems: result.p1Webhook.deliveryProblems }],
    ['P1-provider, ledger', result.p1Provider?.verification],
    ['P1-provider, at the provider', result.p1Provider?.provider],
    ['P2', result.p2?.verification],
    ['P4 ledger', result.p4Ledger?.verification],
    ['P4 end to end', result.p4EndToEnd?.verification],
    ['P5/P3', result.p5?.verification],
    ['M1', result.m1?.verification],
    ...(result.variants ?? []).map((v): [string, Verification] => [`variant ${v.name}`, v.verification]),
    // The primary server's figures are the top-level ones, checked above.
    ...(result.servers ?? []).slice(1).flatMap((s): [string, Verification | undefined][] => [
      [`${s.kind}: P1`, s.p1?.verification],
      [`${s.kind}: P5/P3`, s.p5?.verification],
    ]),
    ['scale-out, 1 worker process', result.scaleOut?.verification.oneProcess],
    ['scale-out, 2 worker processes', result.scaleOut?.verification.twoProcesses],
  ];
  const problems = checks.flatMap(([name, check]) => (check && !check.ok ? check.problems.map((p) => `${name}: ${p}`) : []));
  const temporalRuns = [{ prefix: '', p1: result.p1, p3: result.p3, p5: result.p5 }, ...(result.servers ?? []).slice(1).map((s) => ({ ...s, prefix: `${s.kind}: ` }))];
  for (const run of temporalRuns) {
    const replayTasks = run.p3?.workflowTasksDuringReplays;
    if (replayTasks !== undefined && replayTasks !== null && replayTasks > 0) {
      problems.push(`${run.prefix}P3: ${replayTasks} workflow/query tasks ran during replays`);
    }
  }
  const failedPhases = [
    ...temporalRuns.flatMap((run) => [
      ...(run.p1?.points ?? []).flatMap((p) => [p.charge, p.baseline]),
      ...(run.p3 ? [run.p3.sequential, run.p3.concurrent] : []),
      ...(run.p5 ? [run.p5.idle, run.p5.halfLoad] : []),
    ].map((phase) => ({ phase, prefix: run.prefix }))),
    ...(result.p1Provider?.points ?? []).flatMap((p) => [p.charge, p.baseline]).map((phase) => ({ phase, prefix: '' })),
    ...(result.p1Webhook?.points ?? []).flatMap((p) => [p.charge, p.baseline]).map((phase) => ({ phase, prefix: '' })),
    ...(result.p2?.points ?? []).map((p) => ({ phase: p.charge, prefix: '' })),
    ...(result.scaleOut ? [result.scaleOut.oneProcess, result.scaleOut.twoProcesses] : []).map((phase) => ({ phase, prefix: 'cluster: ' })),
  ].filter(({ phase }) => phase.failed > 0);
  for (const { phase, prefix } of failedPhases) {
    problems.push(`${prefix}${phase.label}: ${phase.failed} operations failed (${phase.failureSamples[0] ?? ''})`);
  }
  return problems;
}

