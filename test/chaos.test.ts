import { describe, expect, it } from 'vitest';
import { formatChaosReport } from '../chaos/report.js';
import { runChaos } from '../chaos/run.js';
import { chaosTemporalStarters } from '../chaos/temporal.js';

/**
 * The short chaos run (`npm run chaos` is the long one): its own PostgreSQL and Temporal, because it
 * restarts them, two worker and two API processes, and every kind of fault at least once, with the
 * payment provider in the loop (`npm run chaos -- --provider`): half the storm's keys are card
 * charges at the Stripe simulator, the other half ledger charges, so one run gives both verdicts.
 * Two runs (one without the provider) asserted the ledger's verdict twice, for a second stack's
 * start-up, build and settling: the ledger charges of this run are held to the same verdict.
 */
const shortRun = {
  durationMs: 40_000,
  workers: 2,
  apis: 2,
  // Every kind of fault by +24 s (PostgreSQL fast at 8 s and immediate at 24 s, Temporal at 18 s,
  // workers every 6 s): faults run one after another and none starts after the storm, so on a loaded
  // machine a slow restart pushed the last kinds of a later plan past the 40 s and the run missed them.
  schedule: { workerKillEveryMs: 6_000, postgresRestartEveryMs: 16_000, temporalRestartEveryMs: 24_000 },
  settleBudgetMs: 180_000,
  startTemporal: chaosTemporalStarters.cluster,
  provider: { cardShare: 0.5, faultEveryMs: 2_000 },
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
  it('under worker SIGKILLs, PostgreSQL and Temporal restarts and a failing, answer-losing provider: no key debited twice, every key decided once, reconcile clean; one PaymentIntent per card charge, one capture, nothing left held, ledger equal to the provider', async () => {
    const { result, log } = await runWithLog(shortRun);
    const report = formatChaosReport(result);
    process.stdout.write(`${report}\n`);
    // The problems lead the message: CI's summary shows a failure's first line only.
    expect(result.problems, `chaos found ${result.problems.length} problems: ${result.problems.join(' | ')}\n${report}\n${log.join('\n')}`).toEqual([]);
    // The ledger's verdict, over every key: the ledger charges as much as the card charges.
    expect(result.keysDebitedTwice).toBe(0);
    expect(result.undecidedKeys).toBe(0);
    expect(result.reconcileOk).toBe(true);
    const kinds = new Set(result.faults.map((fault) => fault.kind));
    expect([...kinds].sort()).toEqual(['PostgreSQL fast restart', 'PostgreSQL immediate restart', 'Temporal restart', 'worker SIGKILL']);
    const provider = result.provider!;
    // Both kinds of charge ran through every fault: enough of each for the verdict to mean something.
    expect(provider.cardKeys).toBeGreaterThan(5);
    expect(result.keys - provider.cardKeys).toBeGreaterThan(5);
    expect(provider.paymentIntents).toBeGreaterThan(0);
    expect(provider.chargesWithTwoPaymentIntents).toBe(0);
    expect(provider.capturedTwice).toBe(0);
    expect(provider.capturedAboveCharge).toBe(0);
    expect(provider.authorizationsLeftHeld).toBe(0);
    expect(provider.payerActionsLeft).toBe(0);
    expect(provider.providerReconcileOk).toBe(true);
    // The provider's faults struck requests, so its verdict was earned under them.
    expect(Object.values(provider.faultsStruck).reduce((sum, n) => sum + n, 0)).toBeGreaterThan(0);
  }, 600_000);
});
