/**
 * Where the idle latency of one charge (P5) goes. Not part of `npm run bench`: run it with
 * `npx tsx bench/experiments/idle-latency-profile.ts [pragma ...]` on a quiet machine. On a fresh
 * bench stack (dev server pragmas from the arguments, default journal_mode=WAL) and an in-process
 * worker with eager start, it times one at a time, each `samples` times, from the cheapest call to
 * the full charge, so each step's cost is the difference between two rows:
 *   gRPC round trip (getSystemInfo) -> a start with no worker (one write) -> an empty workflow
 *   (start + one workflow task + result) -> the bare 3-local-activity workflow -> ChargeWorkflow
 *   started directly -> ChargeService.charge (validation, account check, start, wait)
 * and, ledger only, Try and Confirm one after the other.
 */
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bundleWorkflowCode } from '@temporalio/worker';
import { fileURLToPath } from 'node:url';
import { bundleChargeWorkflows, quietBundlerLogger } from '../../src/worker/charge-worker.js';
import { defaultSqlitePragmas } from '../../src/stack/temporal-dev-server.js';
import { confirmHold, tryHold } from '../../src/ledger/charges.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { chargeWorkflowType } from '../../workflows/definitions.js';
import { baselineWorkflowType, emptyWorkflowType, type BaselineInput } from '../baseline-workflow.js';
import { startBenchStack } from '../lib/bench-stack.js';
import { chargeBody } from '../lib/charging.js';
import { openPopulation, spreadPicker } from '../lib/population.js';
import { benchPolicy, openTemporalSession } from '../lib/session.js';
import { summariseLatencies } from '../lib/stats.js';
import { ledgerIntent } from '../scenarios/ledger-only.js';

const samples = 300;
const warmup = 30;
const pragmas = process.argv.length > 2 ? process.argv.slice(2) : [...defaultSqlitePragmas];

const dataDir = join(tmpdir(), `chargeguard-profile-${process.pid}`);
const stack = await startBenchStack({ dataDir, sqlitePragmas: pragmas, keepData: false, log: (l) => console.error(l) });
const rows: { step: string; p50Ms: number; p90Ms: number; p99Ms: number }[] = [];
try {
  const chargeBundlePath = join(dataDir, 'charge.js');
  const baselineBundlePath = join(dataDir, 'baseline.js');
  await writeFile(chargeBundlePath, (await bundleChargeWorkflows()).code);
  const baselinePath = fileURLToPath(new URL('../baseline-workflow.ts', import.meta.url));
  await writeFile(baselineBundlePath, (await bundleWorkflowCode({ workflowsPath: baselinePath, logger: quietBundlerLogger })).code);
  const session = await openTemporalSession(stack, {
    placement: 'in-process',
    tuning: { maxConcurrentWorkflowTaskExecutions: 100, maxConcurrentActivityTaskExecutions: 100, maxCachedWorkflows: 100, ledgerPoolMaxConnections: 20 },
    eagerStart: true,
    chargeTaskQueue: 'profile-charges',
    baselineTaskQueue: 'profile-baseline',
    bundles: { chargeBundlePath, baselineBundlePath },
  });
  const ledger = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 4 });
  try {
    const population = await openPopulation(ledger, { tenant: 'profile', payers: 2_000, payees: 200 });
    const payer = spreadPicker(population.payers);
    const payee = spreadPicker(population.payees);
    const t = session.temporal;
    const eager = { requestEagerStart: true } as const;

    async function time(step: string, run: (n: number) => Promise<unknown>): Promise<void> {
      for (let n = 0; n < warmup; n++) await run(1_000_000 + n);
      const latencies: number[] = [];
      for (let n = 0; n < samples; n++) {
        const startedAt = performance.now();
        await run(n);
        latencies.push(performance.now() - startedAt);
      }
      const { p50Ms, p90Ms, p99Ms } = summariseLatencies(latencies);
      rows.push({ step, p50Ms, p90Ms, p99Ms });
      console.error(`${step}: p50 ${p50Ms.toFixed(1)} ms`);
    }
    const baselineInput = (key: string, localActivities: boolean): BaselineInput => ({
      payload: { intent: session.charges.buildIntent(population.tenant, key, chargeBody(key, payer(0), payee(0))), policy: benchPolicy },
      localActivities,
    });

    await time('gRPC round trip (getSystemInfo)', () => t.workflowService.getSystemInfo({}));
    await time('start, no worker (one write)', (n) =>
      t.workflow.start(emptyWorkflowType, { taskQueue: 'profile-nobody', workflowId: `nobody-${n}`, args: [baselineInput(`nobody-${n}`, false)] }));
    await time('empty workflow, eager (start + 1 task + result)', (n) =>
      t.workflow.execute(emptyWorkflowType, { taskQueue: 'profile-baseline', workflowId: `empty-${n}`, args: [baselineInput(`e-${n}`, false)], ...eager }));
    await time('empty workflow, no eager start', (n) =>
      t.workflow.execute(emptyWorkflowType, { taskQueue: 'profile-baseline', workflowId: `empty-q-${n}`, args: [baselineInput(`eq-${n}`, false)] }));
    await time('bare 3-local-activity workflow, eager', (n) =>
      t.workflow.execute(baselineWorkflowType, { taskQueue: 'profile-baseline', workflowId: `bare-${n}`, args: [baselineInput(`b-${n}`, true)], ...eager }));
    await time('ChargeWorkflow started directly, eager', (n) => {
      const key = `direct-${n}`;
      const intent = session.charges.buildIntent(population.tenant, key, chargeBody(key, payer(n), payee(n)));
      return t.workflow.execute(chargeWorkflowType, {
        taskQueue: 'profile-charges', workflowId: `charge/${population.tenant}/${key}`, args: [{ intent, policy: benchPolicy }], ...eager,
      });
    });
    await time('ChargeService.charge (full path), eager', (n) => {
      const key = `client-${n}`;
      return session.charges.charge(population.tenant, key, chargeBody(key, payer(n + 500), payee(n)));
    });
    await time('ledger only: Try then Confirm', async (n) => {
      const key = `ledger-${n}`;
      await tryHold(ledger, ledgerIntent(population.tenant, key, payer(n + 1_000), payee(n)), benchPolicy.holdTtlMs);
      await confirmHold(ledger, population.tenant, key, null);
    });
  } finally {
    await ledger.end();
    await session.close();
  }
} finally {
  await stack.stop();
}
console.log(`\nIdle latency, one call at a time, ${samples} samples each; dev server pragmas [${pragmas.join(', ')}]\n`);
console.log('| step | p50 | p90 | p99 |\n|---|---:|---:|---:|');
for (const r of rows) console.log(`| ${r.step} | ${r.p50Ms.toFixed(1)} ms | ${r.p90Ms.toFixed(1)} ms | ${r.p99Ms.toFixed(1)} ms |`);
