import { refusalBySqlState, ledgerRefusals, type LedgerRefusalName } from '../domain/refusals.js';

/** A business refusal from the ledger: a decision, final for that step, never retried. */
export class LedgerRefusalError extends Error {
  override readonly name = 'LedgerRefusalError';
  constructor(
    readonly refusal: LedgerRefusalName,
    message: string,
  ) {
    super(message);
  }
  get type(): string {
    return ledgerRefusals[this.refusal].type;
  }
}

/** Turns the CG-class SQL errors raised by the ledger functions into refusals; leaves the rest alone. */
export function asLedgerRefusal(error: unknown): LedgerRefusalError | null {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return null;
  const refusal = refusalBySqlState(code);
  return refusal ? new LedgerRefusalError(refusal, (error as Error).message) : null;
}
