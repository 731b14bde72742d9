import { ChargeTally, chargeOperation, settleUnsettled } from '../lib/charging.js';
import { measured, tenantFor, type BenchContext, type PhaseFigure } from '../lib/context.js';
import { runInterleaved, type Segment } from '../lib/interleave.js';
import { runClosedLoop } from '../lib/load.js';
import { openPopulation, skewedPicker, spreadPicker, type Picker, type Population } from '../lib/population.js';
import type { TemporalSession } from '../lib/session.js';
import { ratio } from '../lib/stats.js';
import { verifyScenario, type Verification } from '../lib/verify.js';
import { LedgerTally, runLedgerPhase } from './ledger-only.js';
import { spreadPopulationSize } from './p1-throughput.js';

/** P4's traffic: one merchant is paid by every charge; 10 payers make 90% of them. */
const hotPayerCount = 10;
const hotPayerShare = 0.9;

export interface HotPayeeLedger {
  concurrency: number;
  spread: PhaseFigure;
  hot: PhaseFigure;
  /** Diagnostics: one hot payee with spread payers, and hot payers with spread payees. */
  hotPayeeOnly: PhaseFigure;
  hotPayersOnly: PhaseFigure;
  /** hot ÷ spread. */
  ratio: number;
  verification: Verification;
}

export interface HotPayeeEndToEnd {
  concurrency: number;
  spread: PhaseFigure;
  hot: PhaseFigure;
  ratio: number;
  verification: Verification;
}

interface Traffic {
  payer: Picker;
  payee: Picker;
}

function traffic(population: Population, offset: number): Record<'spread' | 'hot' | 'hotPayeeOnly' | 'hotPayersOnly', Traffic> {
  const merchant = population.payees[0]!;
  const hotPayers = skewedPicker(population.payers, hotPayerCount, hotPayerShare);
  return {
    spread: { payer: spreadPicker(population.payers, offset), payee: spreadPicker(population.payees) },
    hot: { payer: hotPayers, payee: () => merchant },
    hotPayeeOnly: { payer: spreadPicker(population.payers, offset), payee: () => merchant },
    hotPayersOnly: { payer: hotPayers, payee: spreadPicker(population.payees) },
  };
}

/** P4 ledger-only: the hot traffic against the spread traffic, same functions, same concurrency. */
export async function runP4Ledger(ctx: BenchContext): Promise<HotPayeeLedger> {
  const concurrency = ctx.settings.p4Concurrency;
  const population = await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, 'p4-ledger'), ...spreadPopulationSize });
  const tally = new LedgerTally();
  const kinds = traffic(population, 3);
  const phase = (name: keyof typeof kinds, segment?: { index: number; durationMs: number; latencySinkMs: number[] }): Promise<PhaseFigure> =>
    runLedgerPhase(ctx, {
      label: `P4 ledger ${name} N=${concurrency}`,
      tenant: population.tenant,
      keyPrefix: segment ? `p4-${name}-s${segment.index}` : `p4-${name}`,
      concurrency,
      ...kinds[name],
      tally,
      ...(segment ? { durationMs: segment.durationMs, latencySinkMs: segment.latencySinkMs } : {}),
    });
  const { a: spread, b: hot } = await runInterleaved(
    ctx.settings.durationMs,
    (segment) => phase('spread', segment),
    (segment) => phase('hot', segment),
  );
  const hotPayeeOnly = await phase('hotPayeeOnly');
  const hotPayersOnly = await phase('hotPayersOnly');
  return {
    concurrency,
    spread,
    hot,
    hotPayeeOnly,
    hotPayersOnly,
    ratio: ratio(hot.operationsPerSecond, spread.operationsPerSecond),
    verification: await verifyScenario(ctx.ledger, population.tenant, tally.confirmed),
  };
}

/** P4 end to end: the same two traffics through ChargeService and the workflow. */
export async function runP4EndToEnd(ctx: BenchContext, session: TemporalSession): Promise<HotPayeeEndToEnd> {
  const concurrency = ctx.settings.p4Concurrency;
  const population = await openPopulation(ctx.ledger, { tenant: tenantFor(ctx, 'p4-e2e'), ...spreadPopulationSize });
  const tally = new ChargeTally();
  const kinds = traffic(population, 5);
  const phase = (name: 'spread' | 'hot'): Segment => ({ index, durationMs, latencySinkMs }) =>
    measured(ctx, session, () =>
      runClosedLoop({
        label: `P4 end to end ${name} N=${concurrency}`,
        concurrency,
        warmupMs: ctx.settings.warmupMs,
        durationMs,
        maxOperations: 200_000,
        latencySinkMs,
        operation: chargeOperation(session.charges, {
          tenant: population.tenant,
          keyPrefix: `p4-${name}-s${index}`,
          ...kinds[name],
          tally,
        }),
      }),
    );
  const { a: spread, b: hot } = await runInterleaved(ctx.settings.p4EndToEndDurationMs, phase('spread'), phase('hot'));
  await settleUnsettled(session.charges, population.tenant, tally);
  return {
    concurrency,
    spread,
    hot,
    ratio: ratio(hot.operationsPerSecond, spread.operationsPerSecond),
    verification: await verifyScenario(ctx.ledger, population.tenant, tally.succeeded),
  };
}
