import type { FaultKind } from './faults.js';
import type { ProviderVerdict } from './provider.js';
import type { ChaosResult } from './run.js';

function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

const ms = (value: number | null): string => (value === null ? 'n/a' : `${(value / 1000).toFixed(1)} s`);

const counts = (tally: Record<string, number>): string =>
  Object.entries(tally)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, n]) => `${name} ${n}`)
    .join(', ') || 'none';

/** Provider mode's rows of the verdict table: the provider's state beside the ledger's. */
function providerRows(p: ProviderVerdict): string[] {
  return [
    `| card keys / provider charges / PaymentIntents | ${p.cardKeys} / ${p.providerCharges} / ${p.paymentIntents} |`,
    `| charges with two PaymentIntents | ${p.chargesWithTwoPaymentIntents} |`,
    `| PaymentIntents captured twice / above their charge | ${p.capturedTwice} / ${p.capturedAboveCharge} |`,
    `| authorizations left requires_capture for a decided charge | ${p.authorizationsLeftHeld} |`,
    `| requires_action left past the hold | ${p.payerActionsLeft} |`,
    `| reconcile --provider stripe | ${p.providerReconcileOk ? 'clean' : `FAILED: ${p.providerReconcileFailed.join(', ')}`} |`,
    `| provider settled after the storm | ${ms(p.settledAfterMs)} |`,
    `| PaymentIntents by status | ${counts(p.paymentIntentStatuses)} |`,
    `| card keys cancelled unasked, by reason | ${counts(p.cancelledByReason)} |`,
    `| 3-D Secure: payer authenticated, charge cancelled unasked | ${p.authenticatedThenCancelled} |`,
    `| manual charges reserved: captured / cancelled / refused / unanswered | ${p.manual.reserved}: ${p.manual.captured} / ${p.manual.cancelled} / ${p.manual.refused} / ${p.manual.unanswered} |`,
    `| captures and cancels, by the API's answer | ${counts(p.settleAnswers)} |`,
    `| simulator faults armed / requests struck | ${p.faultsArmed} / ${counts(p.faultsStruck)} |`,
    `| webhook deliveries, by the receiver's answer | ${counts(p.webhookDeliveries)} |`,
    `| payer authentications, by the simulator's answer | ${counts(p.payerAnswers)} |`,
  ];
}

/** The run as Markdown: the verdict first, then faults with recovery times, then what callers were answered. */
export function formatChaosReport(result: ChaosResult): string {
  const lines: string[] = [];
  lines.push(`## Chaos run (${result.mode}${result.provider !== null ? ', provider' : ''}${result.events ? ', events' : ''}) on the ${result.temporal}: ${result.ok ? 'PASSED' : 'FAILED'}`);
  lines.push('');
  lines.push(`${result.keys} keys, ${result.requests} requests in ${ms(result.durationMs)} (storm and settling).`);
  lines.push('');
  lines.push('| property | value |');
  lines.push('|---|---|');
  lines.push(`| keys debited twice | ${result.keysDebitedTwice ?? 'not read'} |`);
  lines.push(`| keys undecided after callers re-sent | ${result.undecidedKeys} |`);
  lines.push(`| keys answered with two outcomes | ${result.keysWithTwoOutcomes} |`);
  lines.push(`| succeeded / declined | ${result.succeeded} / ${result.declined} |`);
  lines.push(`| holds left TRIED | ${result.openHolds ?? 'not read'} |`);
  lines.push(`| ledger invariants broken | ${Object.keys(result.brokenInvariants).length} |`);
  lines.push(`| reconcile | ${result.reconcileOk ? 'clean' : result.reconcileError !== null ? `FAILED: ${result.reconcileError}` : 'FAILED'} |`);
  lines.push(`| 5xx answers | ${result.fiveXx} |`);
  if (result.provider !== null) lines.push(...providerRows(result.provider));
  if (result.events) {
    const e = result.events;
    lines.push(
      `| webhook endpoints / events / lost (must be 0) | ${e.endpoints} / ${e.events} / ${e.lost} |`,
      `| deliveries duplicated (allowed) / bad signatures / pending / failed | ${e.duplicates} / ${e.badSignatures} / ${e.pending} / ${e.failed} |`,
      `| delivery lag p50 / p99 (event committed to first 2xx) | ${ms(e.lagP50Ms)} / ${ms(e.lagP99Ms)} |`,
    );
  }
  lines.push('');
  lines.push('| fault | injected | back after (median, max) | first decision after (median, max) |');
  lines.push('|---|---|---|---|');
  const kinds = [...new Set(result.faults.map((fault) => fault.kind))] as FaultKind[];
  for (const kind of kinds) {
    const faults = result.faults.filter((fault) => fault.kind === kind);
    const down = faults.map((fault) => fault.endedAtMs - fault.startedAtMs);
    const recovered = faults.flatMap((fault) => (fault.recoveryMs === null ? [] : [fault.recoveryMs]));
    lines.push(
      `| ${kind} | ${faults.length} | ${ms(median(down))}, ${ms(Math.max(...down))} | ` +
        `${ms(median(recovered))}, ${recovered.length > 0 ? ms(Math.max(...recovered)) : 'n/a'} |`,
    );
  }
  lines.push('');
  if (result.provider !== null && result.provider.cancelledSamples.length > 0) {
    lines.push('Card charges cancelled without the storm asking (a sample):');
    lines.push('');
    lines.push('| key | card | payer | reason | created | hold expires | last change | payment |');
    lines.push('|---|---|---|---|---|---|---|---|');
    for (const c of result.provider.cancelledSamples) {
      lines.push(
        `| ${c.key} | ${c.paymentMethod} | ${c.payerActed ?? '-'} | ${c.reason} | ${c.createdAt} | ${c.holdExpiresAt ?? '-'} | ${c.updatedAt} | ${c.paymentId ?? '-'} ${c.paymentStatus ?? ''} |`,
      );
    }
    lines.push('');
  }
  if (result.provider !== null && result.provider.authenticatedThenCancelledCharges.length > 0) {
    lines.push('3-D Secure charges whose payer authenticated and which ended cancelled unasked (times from the charge\'s creation):');
    lines.push('');
    lines.push('| key | capture | failure_reason | payment | payer authenticated | last change | event deliveries | provider requests |');
    lines.push('|---|---|---|---|---|---|---|---|');
    for (const c of result.provider.authenticatedThenCancelledCharges) {
      lines.push(
        `| ${c.key} | ${c.manual === null ? 'automatic' : 'manual'} | ${c.failureReason ?? '-'} | ${c.paymentStatus ?? '-'} | ${ms(c.payerActedAfterMs)} | ${ms(c.lastChangeAfterMs)} | ` +
          `${c.deliveries.join('; ') || 'none'} | ${c.requests.join('; ') || 'none'} |`,
      );
    }
    lines.push('');
  }
  if (result.singleFaults.length > 0) {
    lines.push(`Single faults (settings: ${result.settings}); times from the fault:`);
    lines.push('');
    lines.push('| fault | load (1 min) | keys in flight | decided p50 | p99 | max | undecided | first decision |');
    lines.push('|---|---|---|---|---|---|---|---|');
    for (const f of result.singleFaults) {
      lines.push(
        `| ${f.kind} | ${f.loadAverage.toFixed(1)} | ${f.keysInFlight} | ${ms(f.p50Ms)} | ${ms(f.p99Ms)} | ${ms(f.maxMs)} | ${f.undecided} | ${ms(f.firstDecisionMs)} |`,
      );
    }
    lines.push('');
    lines.push('The slowest key of each fault, its workflow history in ms from the fault:');
    lines.push('');
    for (const [index, f] of result.singleFaults.entries()) {
      if (!f.slowestKey) continue;
      lines.push(`${index + 1}. ${f.kind}, ${f.slowestKey.key} decided after ${ms(f.slowestKey.decidedAfterMs)}, ${f.slowestKey.requests} requests: ${f.slowestKey.timeline ?? ''}`);
    }
    lines.push('');
  }
  lines.push('| answer | count |');
  lines.push('|---|---|');
  for (const [answer, count] of Object.entries(result.answers).sort(([a], [b]) => a.localeCompare(b))) {
    lines.push(`| ${answer} | ${count} |`);
  }
  if (result.problems.length > 0) {
    lines.push('');
    lines.push('Problems:');
    for (const problem of result.problems) lines.push(`- ${problem}`);
  }
  return lines.join('\n');
}
