import { countChargesByStatus } from '../../src/ledger/reports.js';
import { isMissingFile } from '../../src/support/files.js';
import { chargeBody } from '../lib/charging.js';
import { takeCpuSnapshot } from '../lib/cpu.js';
import { tenantFor, type BenchContext } from '../lib/context.js';
import { runBounded } from '../lib/load.js';
import { openPopulation, spreadPicker } from '../lib/population.js';
import { openTemporalSession, type SessionOptions } from '../lib/session.js';
import { verifyScenario, type Verification } from '../lib/verify.js';
import { residentMemoryBytes } from '../lib/workers.js';
import { spreadPopulationSize } from './p1-throughput.js';

export interface M1Result {
  inFlight: number;
  /** The worker process before any charge, and with every hold open and waiting. */
  idleRssBytes: number;
  inFlightRssBytes: number;
  /**
   * The largest RSS seen while the holds were being started (sampled every 250 ms): garbage of the
   * load not yet collected. What a container limit must allow; inFlightRssBytes alone can miss it.
   */
  startPeakRssBytes: number;
  /** The worker's cache size: every waiting charge stays cached unless this is smaller. */
  maxCachedWorkflows: number;
  /** glibc arenas of the worker process (see startWorkersInChild). */
  mallocArenaMax: string;
  /** The worker's main isolate as Node sees it, with every hold waiting (the rest of RSS is native). */
  inFlightMemoryUsage: NodeJS.MemoryUsage;
  /** How the worker process was started (Node flags, entry): memory settings trade CPU for RSS. */
  workerCommand: string;
  /** The worker's CPU time per charge while the holds were started (Try, hold): the price of those settings. */
  workerCpuMsPerCharge: number;
  startDurationMs: number;
  verification: Verification;
}

/**
 * M1: a worker process of its own holds `m1InFlight` manual-capture charges open (Try done, waiting
 * for capture); its resident memory is read from /proc, then every charge is cancelled and the
 * ledger checked (no capture, every hold released).
 */
export async function runM1(ctx: BenchContext, base: Omit<SessionOptions, 'placement' | 'chargeTaskQueue' | 'baselineTaskQueue'>): Promise<M1Result> {
  const inFlight = ctx.settings.m1InFlight;
  const session = await openTemporalSession(ctx.stack, {
    ...base,
    placement: 'process',
    eagerStart: false,
    chargeTaskQueue: `bench-${ctx.runId}-m1`,
    baselineTaskQueue: null,
  });
  try {
    const pid = session.workers.pid!;
    const idleRssBytes = await residentMemoryBytes(pid);
    const population = await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, 'm1'), ...spreadPopulationSize });
    const payer = spreadPicker(population.payers);
    const payee = spreadPicker(population.payees);
    const cpuBefore = await takeCpuSnapshot({ temporal: null, postgres: null, worker: pid });
    const startedAtMs = performance.now();
    const peak = sampleRssPeak(pid, startPeakSampleIntervalMs);
    try {
      await runBounded(inFlight, 16, async (n) => {
        const key = `m1-${n}`;
        await session.charges.startCharge(population.tenant, key, chargeBody(key, payer(n), payee(n), 'manual'));
      });
      await waitForHolds(ctx, population.tenant, inFlight, 120_000);
    } finally {
      peak.stop();
    }
    const startDurationMs = performance.now() - startedAtMs;
    const cpuAfter = await takeCpuSnapshot({ temporal: null, postgres: null, worker: pid });
    const workerCpuMsPerCharge = ((cpuAfter.secondsBy.worker! - cpuBefore.secondsBy.worker!) * 1000) / inFlight;
    // Sampled a few times: the figure is the largest the worker reached while all of them waited.
    let inFlightRssBytes = 0;
    for (let sample = 0; sample < 5; sample++) {
      inFlightRssBytes = Math.max(inFlightRssBytes, await residentMemoryBytes(pid));
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const inFlightMemoryUsage = await session.workers.memoryUsage();
    const mb = (bytes: number): string => `${(bytes / 1e6).toFixed(0)} MB`;
    ctx.log(
      `M1: ${inFlight} holds waiting, worker RSS ${mb(inFlightRssBytes)}, ${mb(peak.bytes())} at most while starting them (heap used ${mb(inFlightMemoryUsage.heapUsed)} of ` +
        `${mb(inFlightMemoryUsage.heapTotal)}, external ${mb(inFlightMemoryUsage.external)}; ` +
        `${workerCpuMsPerCharge.toFixed(1)} ms worker CPU per charge; ${session.workers.command})`,
    );
    await runBounded(inFlight, 16, async (n) => {
      const charge = await session.charges.cancelCharge(population.tenant, `m1-${n}`);
      if (charge.status !== 'cancelled') throw new Error(`m1-${n} is ${charge.status} after cancel`);
    });
    const verification = await verifyScenario(ctx.ledger, population.tenant, 0);
    const byStatus = await countChargesByStatus(ctx.ledger, population.tenant);
    const open = Object.entries(byStatus).reduce((sum, [status, n]) => (status === 'cancelled' ? sum : sum + n), 0);
    if (open !== 0) {
      verification.ok = false;
      verification.problems.push(`${open} charges are not cancelled after cancel`);
    }
    return {
      inFlight,
      idleRssBytes,
      inFlightRssBytes,
      startPeakRssBytes: peak.bytes(),
      maxCachedWorkflows: base.tuning.maxCachedWorkflows,
      mallocArenaMax: process.env.MALLOC_ARENA_MAX ?? '2',
      inFlightMemoryUsage,
      workerCommand: session.workers.command,
      workerCpuMsPerCharge,
      startDurationMs,
      verification,
    };
  } finally {
    await session.close();
  }
}

const startPeakSampleIntervalMs = 250;

/** Polls a process's RSS in the background and keeps the largest reading. */
function sampleRssPeak(pid: number, intervalMs: number): { bytes(): number; stop(): void } {
  let peakBytes = 0;
  const read = (): void => {
    residentMemoryBytes(pid).then(
      (bytes) => void (peakBytes = Math.max(peakBytes, bytes)),
      (error: unknown) => {
        // A worker that has exited has no RSS to sample; any other failure would understate the peak.
        if (!isMissingFile(error)) process.stderr.write(`M1: sampling pid ${pid}'s RSS failed: ${(error as Error).message}\n`);
      },
    );
  };
  read();
  const timer = setInterval(read, intervalMs);
  return { bytes: () => peakBytes, stop: () => clearInterval(timer) };
}

async function waitForHolds(ctx: BenchContext, tenant: string, expected: number, timeoutMs: number): Promise<void> {
  const deadlineMs = Date.now() + timeoutMs;
  for (;;) {
    const held = (await countChargesByStatus(ctx.ledger, tenant)).reserved ?? 0;
    if (held >= expected) return;
    if (Date.now() > deadlineMs) throw new Error(`only ${held} of ${expected} holds after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}
