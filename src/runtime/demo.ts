import { runFlakyAgentDemo, type DemoOptions, type DemoTotals } from '../demo/flaky-agent-demo.js';
import type { ReconcileReport } from '../reconcile/index.js';
import type { LocalRuntime } from './local-runtime.js';

/**
 * The flaky-agent demo on a local runtime, then its tenant reconciled against the workflows. The
 * demo opens its accounts and reads its totals straight from the ledger, so it runs here, where
 * the pool is, and the `demo` command is handed only what it prints.
 */
export async function runDemoOn(runtime: LocalRuntime, options: DemoOptions): Promise<{ totals: DemoTotals; report: ReconcileReport }> {
  const totals = await runFlakyAgentDemo(runtime.context.charges, runtime.context.ledger, options);
  const report = await runtime.context.reconciliation.ledgerAndWorkflows({ tenant: totals.tenant });
  return { totals, report };
}
