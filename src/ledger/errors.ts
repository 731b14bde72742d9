import {
  incurableFaultBySqlState,
  incurableLedgerFaults,
  refusalBySqlState,
  ledgerRefusals,
  type IncurableLedgerFaultName,
  type LedgerRefusalName,
} from '../domain/refusals.js';

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

/**
 * PostgreSQL refused the statement in a way no retry can change (see incurableLedgerFaults). Not a
 * decision: nothing was recorded. Callers choose what that means for their step.
 */
export class IncurableLedgerError extends Error {
  override readonly name = 'IncurableLedgerError';
  constructor(
    readonly fault: IncurableLedgerFaultName,
    readonly sqlState: string,
    message: string,
  ) {
    super(message);
  }
  get type(): string {
    return incurableLedgerFaults[this.fault].type;
  }
}

function sqlStateOf(error: unknown): string | null {
  const code = (error as { code?: unknown } | null)?.code;
  // node-postgres puts the SQLSTATE in `code`; Node's own errors use codes like ECONNREFUSED.
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null;
}

/** Turns the CG-class SQL errors raised by the ledger functions into refusals; leaves the rest alone. */
export function asLedgerRefusal(error: unknown): LedgerRefusalError | null {
  const code = sqlStateOf(error);
  if (code === null) return null;
  const refusal = refusalBySqlState(code);
  return refusal ? new LedgerRefusalError(refusal, (error as Error).message) : null;
}

/** Turns the SQL errors that retrying cannot cure into IncurableLedgerError; leaves the rest alone. */
export function asIncurableLedgerError(error: unknown): IncurableLedgerError | null {
  const code = sqlStateOf(error);
  if (code === null) return null;
  const fault = incurableFaultBySqlState(code);
  return fault ? new IncurableLedgerError(fault, code, `${(error as Error).message} (SQLSTATE ${code})`) : null;
}

/** What a ledger call throws: a refusal, an incurable fault, or the original (retryable) error. */
export function classifyLedgerError(error: unknown): unknown {
  return asLedgerRefusal(error) ?? asIncurableLedgerError(error) ?? error;
}
