import type { ChargeIntent, ChargeRequest } from '../../src/domain/charge.js';
import { chargeFingerprint, chargeIdFor } from '../../src/service/intent.js';
import { confirmHold, tryHold } from '../../src/ledger/charges.js';
import { createLedgerPool } from '../../src/ledger/pool.js';
import { measured, type BenchContext, type PhaseFigure } from '../lib/context.js';
import { runClosedLoop } from '../lib/load.js';
import type { Picker } from '../lib/population.js';
import { benchPolicy } from '../lib/session.js';

/** Ledger-only charges the callers saw confirmed, for the end-of-scenario check. */
export class LedgerTally {
  confirmed = 0;
}

/** A charge intent as ChargeService.buildIntent makes it, without a Temporal client. */
export function ledgerIntent(tenant: string, key: string, payer: string, payee: string): ChargeIntent {
  const request: ChargeRequest = {
    orderId: `order-${key}`,
    payerAccountId: payer,
    payeeAccountId: payee,
    amountMinor: 100,
    currency: 'USD',
    captureMode: 'automatic',
    description: null,
    metadata: null,
  };
  return { tenant, idempotencyKey: key, chargeId: chargeIdFor(tenant, key), fingerprint: chargeFingerprint(request), request };
}

/**
 * Try then Confirm straight against PostgreSQL, the functions the activities call, with one pooled
 * connection per caller: what the ledger sustains with Temporal taken out.
 */
export async function runLedgerPhase(
  ctx: BenchContext,
  options: {
    label: string;
    tenant: string;
    keyPrefix: string;
    concurrency: number;
    payer: Picker;
    payee: Picker;
    tally: LedgerTally;
    /** A segment of an interleaved phase: its own length, and where its latencies go. */
    durationMs?: number;
    latencySinkMs?: number[];
  },
): Promise<PhaseFigure> {
  const pool = createLedgerPool({ databaseUrl: ctx.stack.databaseUrl, maxConnections: options.concurrency });
  try {
    // Open every connection before the clock starts: connection setup is not what P2 measures.
    await Promise.all(Array.from({ length: options.concurrency }, async () => (await pool.connect()))).then((clients) =>
      clients.forEach((client) => client.release()),
    );
    return await measured(ctx, null, () =>
      runClosedLoop({
        label: options.label,
        concurrency: options.concurrency,
        warmupMs: ctx.settings.warmupMs,
        durationMs: options.durationMs ?? ctx.settings.durationMs,
        maxOperations: 5_000_000,
        ...(options.latencySinkMs ? { latencySinkMs: options.latencySinkMs } : {}),
        operation: async (sequence) => {
          const key = `${options.keyPrefix}-${sequence}`;
          const intent = ledgerIntent(options.tenant, key, options.payer(sequence), options.payee(sequence));
          const tried = await tryHold(pool, intent, benchPolicy.holdTtlMs);
          if (tried.holdState !== 'TRIED') throw new Error(`Try of ${key} answered ${tried.holdState}`);
          const confirmed = await confirmHold(pool, options.tenant, key, null);
          if (confirmed.holdState !== 'CONFIRMED') throw new Error(`Confirm of ${key} answered ${confirmed.holdState}`);
          options.tally.confirmed++;
        },
      }),
    );
  } finally {
    await pool.end();
  }
}
