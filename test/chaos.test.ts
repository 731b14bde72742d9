import { describe, expect, it } from 'vitest';
import { formatChaosReport } from '../chaos/report.js';
import { runChaos } from '../chaos/run.js';
import { chaosTemporalStarters } from '../chaos/temporal.js';

/**
 * The short chaos runs (`npm run chaos` is the long one): their own PostgreSQL and Temporal, because
 * they restart them, two worker and two API processes, and every kind of fault at least once; the
 * second with the payment provider in the loop (`npm run chaos -- --provider`).
 */
/** What both short runs share: 40 s on the cluster stack, every kind of fault at least once. */
const shortRun = {
  durationMs: 40_000,
  workers: 2,
  apis: 2,
  schedule: { workerKillEveryMs: 6_000, postgresRestartEveryMs: 24_000, temporalRestartEveryMs: 40_000 },
  settleBudgetMs: 180_000,
  startTemporal: chaosTemporalStarters.cluster,
} as const;

/** Runs chaos with its log kept: a run that throws (not only one that finds problems) shows what happened. */
async function runWithLog(options: Omit<Parameters<typeof runChaos>[0], 'log'>): Promise<{ result: Awaited<ReturnType<typeof runChaos>>; log: string[] }> {
  const log: string[] = [];
  try {
    return { result: await runChaos({ ...options, log: (line) => log.push(line) }), log };
  } catch (error) {
    throw new Error(`${(error as Error).message}\n--- the run's log ---\n${log.join('\n')}`, { cause: error });
  }
}

describe('chaos, short run', () => {
  it('under worker SIGKILLs and PostgreSQL and Temporal restarts: no key debited twice, every key decided once, reconcile clean', async () => {
    const { result, log } = await runWithLog(shortRun);
    const report = formatChaosReport(result);
    process.stdout.write(`${report}\n`);
    expect(result.problems, `${report}\n${log.join('\n')}`).toEqual([]);
    expect(result.keysDebitedTwice).toBe(0);
    expect(result.undecidedKeys).toBe(0);
    expect(result.keys).toBeGreaterThan(5);
    const kinds = new Set(result.faults.map((fault) => fault.kind));
    expect([...kinds].sort()).toEqual(['PostgreSQL fast restart', 'PostgreSQL immediate restart', 'Temporal restart', 'worker SIGKILL']);
  }, 600_000);

  it('with the Stripe simulator as the provider, losing answers and failing: one PaymentIntent per charge, one capture, nothing left held, ledger equal to the provider', async () => {
    const { result, log } = await runWithLog({ ...shortRun, provider: { cardShare: 0.5, faultEveryMs: 2_000 } });
    const report = formatChaosReport(result);
    process.stdout.write(`${report}\n`);
    expect(result.problems, `${report}\n${log.join('\n')}`).toEqual([]);
    const provider = result.provider!;
    expect(provider.cardKeys).toBeGreaterThan(5);
    expect(provider.paymentIntents).toBeGreaterThan(0);
    expect(provider.chargesWithTwoPaymentIntents).toBe(0);
    expect(provider.capturedTwice).toBe(0);
    expect(provider.capturedAboveCharge).toBe(0);
    expect(provider.authorizationsLeftHeld).toBe(0);
    expect(provider.payerActionsLeft).toBe(0);
    expect(provider.providerReconcileOk).toBe(true);
    expect(result.reconcileOk).toBe(true);
    expect(result.keysDebitedTwice).toBe(0);
    expect(result.undecidedKeys).toBe(0);
    // The provider's faults struck requests, and a worker was killed, so the verdict was earned under them.
    expect(Object.values(provider.faultsStruck).reduce((sum, n) => sum + n, 0)).toBeGreaterThan(0);
    expect(result.faults.some((fault) => fault.kind === 'worker SIGKILL')).toBe(true);
  }, 600_000);
});
