/**
 * What every reconciliation check reports, in a module of its own: the checks (reconcile.ts,
 * authority.ts, provider.ts) all produce it, and none of them imports another for it.
 */

/** One check and how many things break it (0 when it holds). */
export interface ReconcileCheck {
  name: string;
  description: string;
  violations: number;
  /** A few offenders, for the on-call engineer. */
  samples: unknown[];
  /** How long the check took, in ms (ledger checks). */
  durationMs?: number;
  /** Why the check did not run (no Temporal client given). */
  skipped?: string;
}
