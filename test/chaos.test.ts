import { describe, expect, it } from 'vitest';
import { formatChaosReport } from '../chaos/report.js';
import { runChaos } from '../chaos/run.js';
import { chaosTemporalStarters } from '../chaos/temporal.js';

/**
 * The short chaos run (`npm run chaos` is the long one): its own PostgreSQL and Temporal, because
 * it restarts them, two worker and two API processes, and every kind of fault at least once.
 */
describe('chaos, short run', () => {
  it('under worker SIGKILLs and PostgreSQL and Temporal restarts: no key debited twice, every key decided once, reconcile clean', async () => {
    const log: string[] = [];
    const result = await runChaos({
      durationMs: 40_000,
      workers: 2,
      apis: 2,
      schedule: { workerKillEveryMs: 6_000, postgresRestartEveryMs: 24_000, temporalRestartEveryMs: 40_000 },
      settleBudgetMs: 180_000,
      startTemporal: chaosTemporalStarters.cluster,
      log: (line) => log.push(line),
    });
    const report = formatChaosReport(result);
    process.stdout.write(`${report}\n`);
    expect(result.problems, `${report}\n${log.join('\n')}`).toEqual([]);
    expect(result.keysDebitedTwice).toBe(0);
    expect(result.undecidedKeys).toBe(0);
    expect(result.keys).toBeGreaterThan(5);
    const kinds = new Set(result.faults.map((fault) => fault.kind));
    expect([...kinds].sort()).toEqual(['PostgreSQL fast restart', 'PostgreSQL immediate restart', 'Temporal restart', 'worker SIGKILL']);
  }, 600_000);
});
