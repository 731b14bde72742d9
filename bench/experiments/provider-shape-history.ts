/**
 * Where a provider-shaped workflow's time goes at N = 1 (P1-provider's floor). Not part of `npm run
 * bench`: run it with `npx tsx bench/experiments/provider-shape-history.ts [runs] [provider-latency-ms]`
 * (defaults 40 and 0) on a quiet machine. On a fresh bench stack (dev server, as `chargeguard start`
 * runs it) with an in-process worker and eager start, it runs P1-provider's baseline workflow (a
 * local no-op, then authorize and capture at the Stripe simulator as remote activities) one at a
 * time, and prints each run's end-to-end time and, for the last run, the gap before every event
 * of its history: the server's own timestamps, so where the time is spent between workflow task,
 * activity and provider is read rather than guessed.
 */
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode, DefaultLogger, Runtime } from '@temporalio/worker';
import { StripeSimulator } from '../../src/providers/stripe/simulator/server.js';
import { defaultSqlitePragmas } from '../../src/stack/temporal-dev-server.js';
import { bundleChargeWorkflows, quietBundlerLogger } from '../../src/worker/charge-worker.js';
import { providerBaselineWorkflowType, type ProviderBaselineInput } from '../baseline-workflow.js';
import { startBenchStack } from '../lib/bench-stack.js';
import { benchPolicy, openTemporalSession } from '../lib/session.js';
import { summariseLatencies } from '../lib/stats.js';
import { defaultTuning } from '../run.js';

const runs = Number(process.argv[2] ?? 40);
const providerLatencyMs = Number(process.argv[3] ?? 0);
/** The first runs warm the worker, the connections and the simulator up: not counted. */
const warmupRuns = 5;

/** The event types this workflow's history holds, by their enum number. */
const eventNames: Record<string, string> = {
  '1': 'started',
  '2': 'completed',
  '5': 'workflow task scheduled',
  '6': 'workflow task started',
  '7': 'workflow task completed',
  '10': 'activity scheduled',
  '11': 'activity started',
  '12': 'activity completed',
  '25': 'marker (local activity)',
};

Runtime.install({ logger: new DefaultLogger('WARN') });
const dataDir = join(tmpdir(), `chargeguard-provider-shape-${process.pid}`);
const log = (line: string): void => void process.stderr.write(`${line}\n`);
const stack = await startBenchStack({ dataDir, sqlitePragmas: [...defaultSqlitePragmas], temporalKind: 'dev', keepData: false, log });
const simulator = await StripeSimulator.start({ port: 0, responseDelayMs: providerLatencyMs });
try {
  const chargeBundlePath = join(dataDir, 'charge-workflows.js');
  const baselineBundlePath = join(dataDir, 'baseline-workflows.js');
  await writeFile(chargeBundlePath, (await bundleChargeWorkflows()).code);
  const baselineWorkflowsPath = fileURLToPath(new URL('../baseline-workflow.ts', import.meta.url));
  await writeFile(baselineBundlePath, (await bundleWorkflowCode({ workflowsPath: baselineWorkflowsPath, logger: quietBundlerLogger })).code);
  const session = await openTemporalSession(stack, {
    placement: 'in-process',
    tuning: defaultTuning,
    eagerStart: true,
    chargeTaskQueue: 'provider-shape-charges',
    baselineTaskQueue: 'provider-shape-baseline',
    bundles: { chargeBundlePath, baselineBundlePath },
    stripeEndpoint: simulator.endpoint,
  });
  try {
    const totalsMs: number[] = [];
    let lastId = '';
    for (let i = 0; i < warmupRuns + runs; i++) {
      lastId = `provider-shape-${i}`;
      const input: ProviderBaselineInput = {
        payload: { policy: benchPolicy },
        localActivities: true,
        payment: { reference: { tenant: 'provider-shape', chargeId: lastId }, amountMinor: 100, currency: 'USD', paymentMethod: 'pm_card_visa' },
      };
      const startedAtMs = performance.now();
      await session.temporal.workflow.execute(providerBaselineWorkflowType, {
        taskQueue: 'provider-shape-baseline',
        workflowId: lastId,
        args: [input],
        ...(session.eagerStart ? { requestEagerStart: true } : {}),
      });
      if (i >= warmupRuns) totalsMs.push(performance.now() - startedAtMs);
    }
    const summary = summariseLatencies(totalsMs);
    process.stdout.write(
      `${runs} runs, provider latency ${providerLatencyMs} ms per request: p50 ${summary.p50Ms.toFixed(0)} ms, ` +
        `min ${Math.min(...totalsMs).toFixed(0)} ms, max ${summary.maxMs.toFixed(0)} ms\n`,
    );
    const history = await session.temporal.workflow.getHandle(lastId).fetchHistory();
    let previousMs: number | null = null;
    process.stdout.write('the last run, the gap before each event (server timestamps):\n');
    for (const event of history.events ?? []) {
      const atMs = Number(event.eventTime?.seconds ?? 0) * 1000 + Math.round((event.eventTime?.nanos ?? 0) / 1e6);
      const name = eventNames[String(event.eventType)] ?? `event type ${String(event.eventType)}`;
      process.stdout.write(`  +${previousMs === null ? 0 : atMs - previousMs} ms  ${name}\n`);
      previousMs = atMs;
    }
  } finally {
    await session.close();
  }
} finally {
  await simulator.stop();
  await stack.stop();
}
