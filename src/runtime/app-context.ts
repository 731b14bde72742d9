import { Client, Connection } from '@temporalio/client';
import { ChargeClient } from '../client/charge-client.js';
import type { ChargeguardConfig } from '../config.js';
import { migrateLedger } from '../ledger/migrate.js';
import { createLedgerPool, type LedgerPool } from '../ledger/pool.js';
import type { ChargePolicy } from '../../workflows/definitions.js';

/** Addresses of the two servers everything talks to. */
export interface Endpoints {
  temporalAddress: string;
  databaseUrl: string;
}

/** What a surface needs to serve callers: the client module and the ledger pool behind it. */
export interface AppContext {
  config: ChargeguardConfig;
  endpoints: Endpoints;
  temporal: Client;
  ledger: LedgerPool;
  charges: ChargeClient;
  close(): Promise<void>;
}

export function policyFromConfig(config: ChargeguardConfig): ChargePolicy {
  return {
    activityStartToCloseMs: config.ACTIVITY_START_TO_CLOSE_MS,
    tryBudgetMs: config.TRY_BUDGET_MS,
    confirmBudgetMs: config.CONFIRM_BUDGET_MS,
    holdTtlMs: config.HOLD_TTL_MS,
  };
}

/** Connects to Temporal and PostgreSQL (migrating the ledger) and builds the one ChargeClient. */
export async function openAppContext(config: ChargeguardConfig, endpoints: Endpoints): Promise<AppContext> {
  await migrateLedger(endpoints.databaseUrl);
  const connection = await Connection.connect({ address: endpoints.temporalAddress });
  const temporal = new Client({ connection, namespace: config.TEMPORAL_NAMESPACE });
  const ledger = createLedgerPool({ databaseUrl: endpoints.databaseUrl, maxConnections: config.LEDGER_POOL_MAX_CONNECTIONS });
  const charges = new ChargeClient({
    temporal,
    ledger,
    policy: policyFromConfig(config),
    amountMinorMax: config.CHARGE_AMOUNT_MINOR_MAX,
    waitBudgetMs: config.CHARGE_WAIT_BUDGET_MS,
  });
  return {
    config,
    endpoints,
    temporal,
    ledger,
    charges,
    close: async () => {
      await connection.close();
      await ledger.end();
    },
  };
}
