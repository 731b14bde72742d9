/**
 * What the one-caller experiments share (charge-deliverer-ab.ts, charge-sql-ab.ts,
 * idle-latency-profile.ts): the bench's workers in this process on a bench stack (both workflow
 * bundles written into the stack's data folder, eager start, the bench's tuning), and one caller's
 * charge timed end to end through the service, as the bench's P1 at N = 1 makes it.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode } from '@temporalio/worker';
import { bundleChargeWorkflows, quietBundlerLogger } from '../../src/worker/charge-worker.js';
import type { BenchStack } from '../lib/bench-stack.js';
import { chargeBody } from '../lib/charging.js';
import { spreadPicker, type Population } from '../lib/population.js';
import { openTemporalSession, type TemporalSession } from '../lib/session.js';

/** Workers in this process on `stack`, their task queues named `<queuePrefix>-charges` and `<queuePrefix>-baseline`. */
export async function openInProcessSession(stack: BenchStack, dataDir: string, queuePrefix: string): Promise<TemporalSession> {
  const chargeBundlePath = join(dataDir, 'charge.js');
  const baselineBundlePath = join(dataDir, 'baseline.js');
  await writeFile(chargeBundlePath, (await bundleChargeWorkflows()).code);
  const baselinePath = fileURLToPath(new URL('../baseline-workflow.ts', import.meta.url));
  await writeFile(baselineBundlePath, (await bundleWorkflowCode({ workflowsPath: baselinePath, logger: quietBundlerLogger })).code);
  return openTemporalSession(stack, {
    placement: 'in-process',
    tuning: { maxConcurrentWorkflowTaskExecutions: 100, maxConcurrentActivityTaskExecutions: 100, maxCachedWorkflows: 100, ledgerPoolMaxConnections: 20 },
    eagerStart: true,
    chargeTaskQueue: `${queuePrefix}-charges`,
    baselineTaskQueue: `${queuePrefix}-baseline`,
    bundles: { chargeBundlePath, baselineBundlePath },
  });
}

/** One new charge per call, a new key each, between the population's accounts: its milliseconds, end to end; anything but succeeded throws. */
export function timedCharges(session: TemporalSession, population: Population): () => Promise<number> {
  const payer = spreadPicker(population.payers);
  const payee = spreadPicker(population.payees);
  let n = 0;
  return async () => {
    const key = `c-${n++}`;
    const startedAt = performance.now();
    const reply = await session.charges.charge(population.tenant, key, chargeBody(key, payer(n), payee(n)));
    if (reply.charge.status !== 'succeeded') throw new Error(`charge ${key}: ${reply.charge.status}`);
    return performance.now() - startedAt;
  };
}

/** The q-quantile of xs (nearest rank, lower). */
export const quantile = (xs: number[], q: number): number => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
};

export const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
