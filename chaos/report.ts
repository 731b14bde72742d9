import type { FaultKind } from './faults.js';
import type { ChaosResult } from './run.js';

function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

const ms = (value: number | null): string => (value === null ? 'n/a' : `${(value / 1000).toFixed(1)} s`);

/** The run as Markdown: the verdict first, then faults with recovery times, then what callers were answered. */
export function formatChaosReport(result: ChaosResult): string {
  const lines: string[] = [];
  lines.push(`## Chaos run (${result.mode}) on the ${result.temporal}: ${result.ok ? 'PASSED' : 'FAILED'}`);
  lines.push('');
  lines.push(`${result.keys} keys, ${result.requests} requests in ${ms(result.durationMs)} (storm and settling).`);
  lines.push('');
  lines.push('| property | value |');
  lines.push('|---|---|');
  lines.push(`| keys debited twice | ${result.keysDebitedTwice} |`);
  lines.push(`| keys undecided after callers re-sent | ${result.undecidedKeys} |`);
  lines.push(`| keys answered with two outcomes | ${result.keysWithTwoOutcomes} |`);
  lines.push(`| succeeded / declined | ${result.succeeded} / ${result.declined} |`);
  lines.push(`| holds left TRIED | ${result.openHolds} |`);
  lines.push(`| ledger invariants broken | ${Object.keys(result.brokenInvariants).length} |`);
  lines.push(`| reconcile | ${result.reconcileOk ? 'clean' : 'FAILED'} |`);
  lines.push(`| 5xx answers | ${result.fiveXx} |`);
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
