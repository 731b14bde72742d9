import type { ReconcileReport } from './reconcile.js';

const number = new Intl.NumberFormat('en-US');

function tally(counts: Record<string, number | undefined>): string {
  const parts = Object.entries(counts)
    .filter(([, n]) => (n ?? 0) > 0)
    .map(([name, n]) => `${name} ${number.format(n ?? 0)}`);
  return parts.length > 0 ? parts.join(' · ') : 'none';
}

/**
 * The short report a person reads after `reconcile`: the counts, then one line per check.
 * Amounts are in minor units, summed across currencies (the checks, not these sums, are the proof).
 */
export function formatReconcileReport(report: ReconcileReport): string {
  const c = report.counts;
  const failed = report.checks.filter((check) => check.violations > 0);
  const skipped = report.checks.filter((check) => check.skipped);
  const lines = [
    `reconcile ${report.ok ? 'OK' : 'FAILED'} · ${report.tenant ? `tenant ${report.tenant}` : 'all tenants'} · ` +
      `${report.startedAt} · ${number.format(report.durationMs)} ms`,
    `  charges    ${number.format(c.charges)}: ${tally(c.chargesByStatus)}`,
    `  holds      ${number.format(c.openHolds)} open, ${number.format(c.heldMinor)} held`,
    `  captured   ${number.format(c.capturedMinor)}; refunded ${number.format(c.refundedMinor)} in ` +
      `${number.format(c.refunds.succeeded)} refunds (${number.format(c.refunds.failed)} refused)`,
    `  journal    ${number.format(c.journalEntries)} entries in ` +
      `${number.format(Object.values(c.transfersByKind).reduce((a, b) => a + b, 0))} transfers: ${tally(c.transfersByKind)}`,
    `  accounts   ${number.format(c.accounts)}`,
    `  audit      ${number.format(Object.values(c.audit.byKey).reduce((a, b) => a + b, 0))} charges, refunds and deposits by ` +
      `${number.format(Object.keys(c.audit.byKey).length)} API keys; ${number.format(c.audit.withoutKey)} by the operator or from before audit`,
    skipped.length > 0
      ? `  workflows  not checked (${skipped[0]!.skipped})`
      : `  workflows  ${number.format(c.workflowsExamined)} closed ChargeWorkflow executions compared, ` +
        `${number.format(c.workflowsMatched)} match the ledger; ` +
        `${number.format(c.holdsExamined)} open holds checked`,
    `  checks     ${report.checks.length - failed.length - skipped.length} passed, ${failed.length} failed` +
      (skipped.length > 0 ? `, ${skipped.length} skipped` : ''),
  ];
  for (const check of report.checks) {
    const mark = check.skipped ? '-' : check.violations > 0 ? '✗' : '✓';
    const detail =
      check.violations > 0
        ? ` (${check.description}): ${number.format(check.violations)} violation(s), e.g. ${JSON.stringify(check.samples[0])}`
        : '';
    lines.push(`    ${mark} ${check.name}${detail}`);
  }
  return lines.join('\n');
}
