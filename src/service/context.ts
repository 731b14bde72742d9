import type { Client } from '@temporalio/client';
import type { LedgerPool } from '../ledger/pool.js';
import type { ChargePolicy } from '../../workflows/definitions.js';
import type { ChargeAdmission } from './admission.js';

/** What every part of the service works with: ChargeService's options, defaults applied once. */
export interface ServiceContext {
  temporal: Client;
  ledger: LedgerPool;
  policy: ChargePolicy;
  amountMinorMax: number;
  /** The longest any call waits for an outcome; a caller's own wait can only be shorter. */
  waitBudgetMs: number;
  /** Bound on starting (or attaching to) a charge; see ChargeServiceOptions.startTimeoutMs. */
  startTimeoutMs: number;
  taskQueue: string;
  /** Workflow task timeout of the charges and refunds started; see defaultWorkflowTaskTimeoutMs. */
  workflowTaskTimeoutMs: number;
  eagerWorkflowStart: boolean;
  /** The bound on new charges in flight in this process; null: none (src/service/admission.ts). */
  admission: ChargeAdmission | null;
  /** Aborted by ChargeService.close(): what still runs after its caller was answered stops. */
  closing: AbortSignal;
}
