import {
  Client,
  Connection,
  NamespaceNotFoundError,
  isRetryableError,
  makeGrpcRetryInterceptor,
  type ConnectionLike,
  type ConnectionOptions,
} from '@temporalio/client';
import { WebhookEndpointsService } from '../service/webhook-endpoints.js';
import { doorSettingsFromConfig, type DoorConfig } from './webhook-settings.js';
import { ChargeService } from '../service/charge-service.js';
import { AccountsService } from '../service/accounts-service.js';
import { ApiKeyService } from '../service/api-key-service.js';
import { IdempotencyTokens } from '../service/idempotency-tokens.js';
import { EventStreamSource } from '../service/event-stream.js';
import { LedgerReadings } from '../service/ledger-readings.js';
import { ProviderEventService, type ProviderEventServiceOptions } from '../service/provider-events.js';
import { RateLimitService } from '../service/rate-limit-service.js';
import { Reconciliation } from '../service/reconciliation.js';
import { WebhookSecretService, WebhookService } from '../service/webhooks.js';
import { admissionDefaults } from '../service/admission.js';
import { grpcCodeOf, isDatabaseUnavailable, isTemporalUnavailable, workerAttributionInterceptor } from '../service/unavailable.js';
import type { ChargeguardConfig } from '../config.js';
import { isMigrationLockBusy, migrateLedger } from '../ledger/migrate.js';
import { closeLedgerPool, createLedgerPool, type LedgerPool } from '../ledger/pool.js';
import type { StepBatchLimits } from '../ledger/step-batches.js';
import type { ChargePolicy } from '../../workflows/definitions.js';
import { maskDatabaseUrl, waitForDependency, type DependencyWaitLimits } from '../support/dependency-wait.js';
import { clientConnectionSecurity, plaintextTemporal, temporalConnectionSecurity, type TemporalConnectionSecurity } from './temporal-connection.js';
import { clientDataConverter } from '../codec/data-converter.js';
import { assertPayloadKeysMatchWorkers } from '../codec/key-advertisement.js';
import { describePayloadProtection, payloadProtectionFromSettings } from '../codec/payload-protection.js';
import { chargeTaskQueue } from '../../workflows/definitions.js';

/** Addresses of the two servers everything talks to. */
export interface Endpoints {
  temporalAddress: string;
  /** The app role's URL: every query the service makes. */
  databaseUrl: string;
  /** The schema owner's URL, for migrations only; without it migrations go through databaseUrl (see migrateLedger). */
  migrationDatabaseUrl?: string;
}

/**
 * What a surface (API, MCP, CLI) is handed to serve callers: the services, never the ledger pool
 * behind them, so that no surface runs SQL or a ledger step itself. Every service of one context
 * shares one pool (and one Temporal client).
 */
export interface AppContext {
  config: ChargeguardConfig;
  endpoints: Endpoints;
  temporal: Client;
  charges: ChargeService;
  accounts: AccountsService;
  /** Server-issued single-use idempotency tokens (POST /v1/idempotency-tokens, Idempotency-Token). */
  tokens: IdempotencyTokens;
  /** API keys: authentication, signed requests, administration. */
  keys: ApiKeyService;
  /** Request rate and open holds limits, per key, tenant, source address and provider. */
  limits: RateLimitService;
  /** Deposit callbacks (POST /v1/webhooks/{provider}). */
  webhooks: WebhookService;
  /** The providers' events about provider charges, verified by the connectors the caller configured. */
  providerEvents(options: Omit<ProviderEventServiceOptions, 'ledger'>): ProviderEventService;
  /** What readiness and /metrics read from the ledger. */
  readings: LedgerReadings;
  reconciliation: Reconciliation;
  /** The outbound events still to publish on the event stream, and the one-publisher lock (docs/queues.md). */
  eventStream: EventStreamSource;
  /** Webhook endpoints (outbound deliveries of events), checked through the configured outbound door. */
  webhookEndpoints: WebhookEndpointsService;
  close(): Promise<void>;
}

/**
 * The context with the ledger pool it was built on: for the composition root (a worker in this
 * process), tests and the bench. Surfaces are handed it as an AppContext, which has no pool.
 */
export interface RuntimeContext extends AppContext {
  ledger: LedgerPool;
}

/** The parts a context is built from; the services are made on its pool. */
export interface AppContextParts {
  config: ChargeguardConfig;
  endpoints: Endpoints;
  temporal: Client;
  ledger: LedgerPool;
  charges: ChargeService;
  close(): Promise<void>;
}

/** The context's services, each on the one pool and client of `parts`. */
export function appContextOn(parts: AppContextParts): RuntimeContext {
  const { config, ledger, temporal } = parts;
  return {
    ...parts,
    accounts: new AccountsService({ ledger, amountMinorMax: config.CHARGE_AMOUNT_MINOR_MAX }),
    tokens: new IdempotencyTokens(ledger),
    keys: new ApiKeyService(ledger),
    limits: new RateLimitService(ledger),
    webhooks: new WebhookService({ ledger, amountMinorMax: config.CHARGE_AMOUNT_MINOR_MAX }),
    providerEvents: (options) => new ProviderEventService({ ...options, ledger }),
    readings: new LedgerReadings(ledger),
    reconciliation: new Reconciliation({ ledger, temporal }),
    eventStream: new EventStreamSource(ledger),
    webhookEndpoints: new WebhookEndpointsService({ ledger, door: doorSettingsFromConfig(config) }),
  };
}

export function policyFromConfig(config: ChargeguardConfig): ChargePolicy {
  return {
    activityStartToCloseMs: config.ACTIVITY_START_TO_CLOSE_MS,
    tryBudgetMs: config.TRY_BUDGET_MS,
    confirmBudgetMs: config.CONFIRM_BUDGET_MS,
    holdTtlMs: config.HOLD_TTL_MS,
    ledgerRetryMaxIntervalMs: config.LEDGER_RETRY_MAX_INTERVAL_MS,
  };
}

export function dependencyWaitLimitsFromConfig(config: ChargeguardConfig): DependencyWaitLimits {
  return {
    initialDelayMs: config.DEPENDENCY_WAIT_INITIAL_DELAY_MS,
    maxDelayMs: config.DEPENDENCY_WAIT_MAX_DELAY_MS,
    budgetMs: config.DEPENDENCY_WAIT_BUDGET_MS,
  };
}

/**
 * gRPC reconnect backoff of the client connection. grpc-js's defaults (1 s, x1.6 per failure, up to
 * 120 s) meant that after a 20 s Temporal restart the channel's next reconnect attempt could be 10 s
 * or more away: the API answered 503 for 9-24 s after Temporal listened again. Capped at 1 s, the
 * first call after Temporal is back succeeds within about a second; a reconnect attempt to a
 * loopback or LAN address costs next to nothing.
 */
export const temporalReconnectBackoff = { initialMs: 100, maxMs: 1_000 } as const;

/**
 * The SDK retries UNAVAILABLE calls with a delay growing to 5 s; a call that started during an
 * outage would sleep through the recovery. The same retries, with the delay capped at 1 s.
 */
const temporalCallRetry = { maxAttempts: 10, initialDelayMs: 100, factor: 1.7, maxDelayMs: 1_000, jitter: 0.2 } as const;

/** Bound on one attempt to reach Temporal at start; attempts repeat within the wait budget. */
const temporalConnectAttemptMs = 3_000;

export function temporalConnectionOptions(address: string, security: TemporalConnectionSecurity = plaintextTemporal): ConnectionOptions {
  return {
    address,
    ...clientConnectionSecurity(security),
    connectTimeout: temporalConnectAttemptMs,
    channelArgs: {
      'grpc.initial_reconnect_backoff_ms': temporalReconnectBackoff.initialMs,
      'grpc.max_reconnect_backoff_ms': temporalReconnectBackoff.maxMs,
    },
    interceptors: [
      makeGrpcRetryInterceptor({
        delayFunction: (attempt) =>
          Math.min(temporalCallRetry.maxDelayMs, temporalCallRetry.initialDelayMs * temporalCallRetry.factor ** attempt) *
          (1 - temporalCallRetry.jitter + Math.random() * 2 * temporalCallRetry.jitter),
        retryableDecider: (attempt, status) => attempt < temporalCallRetry.maxAttempts && isRetryableError(status),
      }),
    ],
  };
}

/** A failure to reach Temporal at start that waiting may cure: down, restarting, or its namespace not registered yet. */
export function isTemporalStartFailureTransient(error: unknown): boolean {
  if (error instanceof NamespaceNotFoundError) return true;
  // No gRPC status at all: the channel never connected (refused, DNS, connect timeout).
  if (grpcCodeOf(error) === null) return true;
  return isTemporalUnavailable(error);
}

/**
 * A failure to reach the database at start that waiting may cure: down, starting up, another
 * migration running, or the database not created yet (a server whose provisioning creates it just
 * after it starts listening, as a compose init script or the embedded stack does).
 */
export function isDatabaseStartFailureTransient(error: unknown): boolean {
  return isDatabaseUnavailable(error) || isMigrationLockBusy(error) || isDatabaseNotCreatedYet(error);
}

/** SQLSTATE 3D000 invalid_catalog_name: only at start is it worth waiting for. */
function isDatabaseNotCreatedYet(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === '3D000';
}

interface WaitOptions {
  limits: DependencyWaitLimits;
  log: (line: string) => void;
  signal?: AbortSignal;
}

/** Migrates the ledger, waiting for PostgreSQL (and for another process's migration) within the limits. */
export async function migrateLedgerWhenReachable(databaseUrl: string, options: WaitOptions): Promise<void> {
  await waitForDependency(
    { dependency: 'database', address: maskDatabaseUrl(databaseUrl), purpose: 'migrate the ledger' },
    // Waiting in steps of the max delay logs each wait for another process's migration; without a
    // wait budget (one-shot commands, tests) the lock is simply waited for, as long as migrateLedger allows.
    () => migrateLedger(databaseUrl, () => {}, options.limits.budgetMs > 0 ? { lockWaitMs: options.limits.maxDelayMs } : {}),
    { ...options, isTransient: isDatabaseStartFailureTransient },
  );
}

/** The batching limits of the ledger's steps, as configured. */
export function stepBatchLimitsFromConfig(config: Pick<ChargeguardConfig, 'LEDGER_STEP_BATCH_IN_FLIGHT' | 'LEDGER_STEP_BATCH_MAX_SIZE'>): StepBatchLimits {
  return { maxInFlight: config.LEDGER_STEP_BATCH_IN_FLIGHT, maxBatchSize: config.LEDGER_STEP_BATCH_MAX_SIZE };
}

/** A ledger pool whose first connection has been made, waiting for PostgreSQL within the limits. */
export async function openLedgerPoolWhenReachable(
  databaseUrl: string,
  maxConnections: number,
  options: WaitOptions,
  stepBatchLimits?: StepBatchLimits,
): Promise<LedgerPool> {
  const ledger = createLedgerPool({ databaseUrl, maxConnections, ...(stepBatchLimits ? { stepBatchLimits } : {}) });
  try {
    await waitForDependency(
      { dependency: 'database', address: maskDatabaseUrl(databaseUrl), purpose: 'open the ledger pool' },
      () => ledger.query('SELECT 1'),
      { ...options, isTransient: isDatabaseStartFailureTransient },
    );
    return ledger;
  } catch (error) {
    await ledger.end().catch((endError: unknown) => options.log(`closing the ledger pool failed: ${(endError as Error).message}`));
    throw error;
  }
}

/** A Temporal client connection that answered, and whose namespace exists, waiting within the limits. */
export async function connectTemporalWhenReachable(
  address: string,
  namespace: string,
  options: WaitOptions & { security?: TemporalConnectionSecurity },
): Promise<Connection> {
  return waitForDependency(
    { dependency: 'temporal', address, purpose: `connect (namespace ${namespace})` },
    async () => {
      // Not Connection.connect(): a failed connect leaves its gRPC channel open, one per attempt.
      const connection = Connection.lazy(temporalConnectionOptions(address, options.security));
      try {
        await connection.ensureConnected();
        await connection.withDeadline(Date.now() + temporalConnectAttemptMs, () => connection.workflowService.describeNamespace({ namespace }));
        return connection;
      } catch (error) {
        await connection.close().catch((closeError: unknown) => options.log(`closing the failed Temporal connection failed: ${(closeError as Error).message}`));
        throw error;
      }
    },
    { ...options, isTransient: isTemporalStartFailureTransient },
  );
}

/** One attempt, no waiting: what one-shot commands (charge, status) and tests want. */
const noWaiting: DependencyWaitLimits = { initialDelayMs: 0, maxDelayMs: 0, budgetMs: 0 };

/**
 * The context of a long-running surface (api, mcp) against TEMPORAL_ADDRESS and DATABASE_URL: a
 * dependency that is down at start is waited for within the config's DEPENDENCY_WAIT_* limits,
 * each wait logged.
 */
export async function openServiceContext(config: ChargeguardConfig, log: (line: string) => void): Promise<AppContext> {
  if (!config.TEMPORAL_ADDRESS || !config.DATABASE_URL) {
    throw new Error('TEMPORAL_ADDRESS and DATABASE_URL must be set: point them at the servers `chargeguard start` printed (or at your own)');
  }
  return openAppContext(
    config,
    { temporalAddress: config.TEMPORAL_ADDRESS, databaseUrl: config.DATABASE_URL, migrationDatabaseUrl: config.MIGRATION_DATABASE_URL },
    { log, waitLimits: dependencyWaitLimitsFromConfig(config) },
  );
}

/**
 * Connects to Temporal and PostgreSQL (migrating the ledger) and builds the one ChargeService.
 * With `waitLimits`, either dependency being down at start is waited out with bounded backoff,
 * each wait logged through `log`; without, the first failure is thrown.
 * With `workerConnection` (a worker in this process, connected through it) the client shares that
 * connection and asks for eager workflow start: the server hands a new charge's first workflow task
 * straight back to this process instead of through the task queue (P1 x1.8, idle p50 98 -> 60 ms in
 * the bench). The caller keeps owning that connection; close() leaves it open.
 */
export async function openAppContext(
  config: ChargeguardConfig,
  endpoints: Endpoints,
  options: {
    workerConnection?: ConnectionLike;
    log?: (line: string) => void;
    waitLimits?: DependencyWaitLimits;
    /**
     * Compare the payload keys with those of the workers polling the charges queue, refusing to
     * start on a mismatch (codec/key-advertisement.ts); default true. Skipped with a worker in this
     * process, which holds the same keys.
     */
    checkWorkerKeys?: boolean;
  } = {},
): Promise<RuntimeContext> {
  const wait: WaitOptions = { limits: options.waitLimits ?? noWaiting, log: options.log ?? (() => {}) };
  // Before anything is opened: a certificate file or a key file that cannot be read, or no payload
  // keys where the deployment needs them, stops the start here.
  const temporalSecurity = temporalConnectionSecurity(config);
  const payload = payloadProtectionFromSettings(config);
  wait.log(describePayloadProtection(payload));
  await migrateLedgerWhenReachable(endpoints.migrationDatabaseUrl ?? endpoints.databaseUrl, wait);
  const ledger = await openLedgerPoolWhenReachable(endpoints.databaseUrl, config.LEDGER_POOL_MAX_CONNECTIONS, wait, stepBatchLimitsFromConfig(config));
  let ownConnection: Connection | null = null;
  try {
    ownConnection = options.workerConnection
      ? null
      : await connectTemporalWhenReachable(endpoints.temporalAddress, config.TEMPORAL_NAMESPACE, { ...wait, security: temporalSecurity });
    if (ownConnection !== null && options.checkWorkerKeys !== false) {
      await assertPayloadKeysMatchWorkers(ownConnection.workflowService, {
        namespace: config.TEMPORAL_NAMESPACE,
        taskQueue: chargeTaskQueue,
        protection: payload,
        log: wait.log,
      });
    }
  } catch (error) {
    await ownConnection?.close().catch((closeError: unknown) => wait.log(`closing the Temporal connection failed: ${(closeError as Error).message}`));
    await ledger.end().catch((endError: unknown) => wait.log(`closing the ledger pool failed: ${(endError as Error).message}`));
    throw error;
  }
  const connection = options.workerConnection ?? ownConnection!;
  const temporal = new Client({
    connection,
    namespace: config.TEMPORAL_NAMESPACE,
    interceptors: { workflow: [workerAttributionInterceptor(connection)] },
    // Payloads encrypted as the workers expect them (docs/back-door.md); what cannot be decoded is an error.
    dataConverter: clientDataConverter(payload),
  });
  const charges = new ChargeService({
    temporal,
    ledger,
    policy: policyFromConfig(config),
    amountMinorMax: config.CHARGE_AMOUNT_MINOR_MAX,
    waitBudgetMs: config.CHARGE_WAIT_BUDGET_MS,
    workflowTaskTimeoutMs: config.WORKFLOW_TASK_TIMEOUT_MS,
    eagerWorkflowStart: options.workerConnection !== undefined,
    admission: {
      maxChargesInFlight: config.CHARGE_ADMISSION_MAX_IN_FLIGHT,
      retryAfterSeconds: admissionDefaults.retryAfterSeconds,
      releaseWatchMaxMs: config.CHARGE_ADMISSION_WATCH_MAX_MS,
      describeBudgetMs: config.CHARGE_ADMISSION_DESCRIBE_BUDGET_MS,
    },
  });
  return appContextOn({
    config,
    endpoints,
    temporal,
    ledger,
    charges,
    close: async () => {
      charges.close();
      await ownConnection?.close();
      await closeLedgerPool(ledger);
    },
  });
}

/** The ledger's services alone, without Temporal: what the account, key, secret and provider reconcile commands use. */
export interface LedgerServices {
  accounts: AccountsService;
  keys: ApiKeyService;
  webhookSecrets: WebhookSecretService;
  /** The provider reconciliation only: there is no Temporal client to check workflows against. */
  reconciliation: Pick<Reconciliation, 'provider'>;
  webhookEndpoints: WebhookEndpointsService;
  close(): Promise<void>;
}

/** Connections of a one-shot command that only touches the ledger: one query at a time, and a spare. */
const ledgerServicesMaxConnections = 2;

/** Migrates the ledger (one attempt, no waiting) and opens a small pool for one command's services. */
export async function openLedgerServices(
  config: Pick<ChargeguardConfig, 'CHARGE_AMOUNT_MINOR_MAX'> & DoorConfig,
  endpoints: Pick<Endpoints, 'databaseUrl' | 'migrationDatabaseUrl'>,
): Promise<LedgerServices> {
  await migrateLedger(endpoints.migrationDatabaseUrl ?? endpoints.databaseUrl);
  const ledger = createLedgerPool({ databaseUrl: endpoints.databaseUrl, maxConnections: ledgerServicesMaxConnections });
  return {
    accounts: new AccountsService({ ledger, amountMinorMax: config.CHARGE_AMOUNT_MINOR_MAX }),
    keys: new ApiKeyService(ledger),
    webhookSecrets: new WebhookSecretService(ledger),
    reconciliation: new Reconciliation({ ledger, temporal: null }),
    webhookEndpoints: new WebhookEndpointsService({ ledger, door: doorSettingsFromConfig(config) }),
    close: () => ledger.end(),
  };
}
