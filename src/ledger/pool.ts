import pg from 'pg';
import { setStepBatchLimits, type StepBatchLimits } from './step-batches.js';

/** Limits of the connection pool; each is explicit so a saturated pool is a visible choice. */
export interface LedgerPoolOptions {
  databaseUrl: string;
  maxConnections?: number;
  connectTimeoutMs?: number;
  statementTimeoutMs?: number;
  idleTimeoutMs?: number;
  /** Where an idle connection's failure is reported (default: a line on stderr). */
  onIdleClientError?: (error: Error) => void;
  /** How Trys and Confirms through this pool are batched under load (default `defaultStepBatchLimits`). */
  stepBatchLimits?: StepBatchLimits;
}

const INT8_OID = 20;

/** Amounts are bigint in SQL and safe integers in JavaScript; anything larger is a bug, not a value. */
function parseSafeInt8(text: string): number {
  const value = Number(text);
  if (!Number.isSafeInteger(value)) {
    throw new RangeError(`bigint ${text} from the ledger is outside the safe integer range`);
  }
  return value;
}

const ledgerTypes = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8_OID && format !== 'binary') return parseSafeInt8;
    return pg.types.getTypeParser(oid, format);
  },
} as pg.CustomTypesConfig;

export function createLedgerPool(options: LedgerPoolOptions): pg.Pool {
  const pool = new pg.Pool({
    connectionString: options.databaseUrl,
    max: options.maxConnections ?? 20,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 5_000,
    idleTimeoutMillis: options.idleTimeoutMs ?? 30_000,
    statement_timeout: options.statementTimeoutMs ?? 10_000,
    application_name: 'chargeguard',
    types: ledgerTypes,
  });
  if (options.stepBatchLimits) setStepBatchLimits(pool, options.stepBatchLimits);
  // An idle client that loses its connection must not crash the process; the next query reconnects.
  // It is still reported: a database restarting under a running service should be visible.
  pool.on(
    'error',
    options.onIdleClientError ??
      ((error) => process.stderr.write(`ledger pool: an idle connection failed (${error.message}); the next query reconnects\n`)),
  );
  // A checked-out client (a transaction of several statements: Confirm's lock and capture, a
  // webhook's credit, reconcile) that loses its connection emits 'error' too, and the pool listens
  // only to idle ones: without a listener of its own, Node turns it into an uncaught exception and
  // the worker exits (seen when PostgreSQL crashed under load). The statement in flight still fails
  // and is retried as a system fault; the client is discarded when it is released.
  // Only while checked out: an idle client's failure is the pool's listener's to report (above),
  // and this one called every idle connection "in use" too, twice over.
  const checkedOut = new WeakSet<pg.PoolClient>();
  pool.on('acquire', (client) => checkedOut.add(client));
  pool.on('release', (_error, client) => checkedOut.delete(client));
  const open: OpenClients = { clients: new Set(), onAllClosed: new Set() };
  openClients.set(pool, open);
  pool.on('remove', (client) => {
    open.clients.delete(client);
    if (open.clients.size === 0) for (const notify of open.onAllClosed) notify();
  });
  pool.on('connect', (client) => {
    open.clients.add(client);
    client.on('error', (error) => {
      if (!checkedOut.has(client)) return;
      process.stderr.write(`ledger pool: a connection in use failed (${error.message}); its statement fails and is retried\n`);
    });
  });
  return pool;
}

export type LedgerPool = pg.Pool;

/** Each ledger pool's clients that have not finished closing (connected, not yet removed). */
interface OpenClients {
  clients: Set<pg.PoolClient>;
  onAllClosed: Set<() => void>;
}
const openClients = new WeakMap<pg.Pool, OpenClients>();

/** Bound on waiting for the connections to close after pool.end(); a hung socket must not hang a stop. */
export const poolCloseWaitMs = 5_000;

/**
 * pool.end(), and then until every connection has closed. pg's end() resolves once it has asked the
 * idle connections to close, not when they have: a PostgreSQL stopped right after (as `start` stops
 * its embedded server next) still finds their backends and ends them with "terminating connection
 * due to administrator command", which the pool reported as a failed connection on a normal stop.
 */
export async function closeLedgerPool(pool: pg.Pool): Promise<void> {
  await pool.end();
  const open = openClients.get(pool);
  if (open === undefined || open.clients.size === 0) return;
  await new Promise<void>((resolve) => {
    const timer = setTimeout(done, poolCloseWaitMs);
    timer.unref();
    function done(): void {
      clearTimeout(timer);
      open!.onAllClosed.delete(done);
      resolve();
    }
    open.onAllClosed.add(done);
  });
}
