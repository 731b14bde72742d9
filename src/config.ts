import { z } from 'zod';
import { defaultStickyScheduleToStartMs, defaultWorkflowTaskTimeoutMs } from '../workflows/task-timeouts.js';
import { defaultStepBatchLimits } from './ledger/step-batches.js';
import { limits } from './domain/limits.js';
import { codecTokenMinLength } from './codec/codec-token.js';
import { parsePayloadKeyRing } from './codec/key-ring.js';
import { plaintextPolicies } from './codec/payload-protection.js';
import { admissionDefaults } from './service/admission.js';
import { verifiedKeyTtlMsDefault } from './auth/verified-keys.js';
import { addressLimitDefaults, rateLimitBounds, rateLimitDefaults } from './domain/rate-limits.js';

const positiveMs = z.coerce.number().int().positive();
const perSecond = z.coerce.number().int().min(1).max(rateLimitBounds.ratePerSecondMax);
const burst = z.coerce.number().int().min(1).max(rateLimitBounds.burstMax);
const openHolds = z.coerce.number().int().min(1).max(rateLimitBounds.maxOpenHoldsMax);
/** A switch: `true` or `false` (also 1/0, on/off, yes/no), anything else refused. */
const onOff = z
  .enum(['true', 'false', '1', '0', 'on', 'off', 'yes', 'no'])
  .transform((value) => ['true', '1', 'on', 'yes'].includes(value));

/**
 * Every setting the service reads from its environment, validated at start so a typo fails loudly
 * instead of running with a surprise. Each name carries its unit.
 */
const configSchema = z.object({
  /** host:port of a Temporal frontend; unset means start the local dev server. */
  TEMPORAL_ADDRESS: z.string().min(1).optional(),
  TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
  /**
   * Security of the connections to TEMPORAL_ADDRESS, in the Temporal CLI's and SDKs' own names
   * (TLS, mTLS, API key); built and checked by runtime/temporal-connection.ts, which reads the files
   * at start. docs/operations.md, Connecting to Temporal securely.
   */
  TEMPORAL_API_KEY: z.string().optional(),
  TEMPORAL_TLS: z.string().optional(),
  TEMPORAL_TLS_CLIENT_CERT_PATH: z.string().optional(),
  TEMPORAL_TLS_CLIENT_CERT_DATA: z.string().optional(),
  TEMPORAL_TLS_CLIENT_KEY_PATH: z.string().optional(),
  TEMPORAL_TLS_CLIENT_KEY_DATA: z.string().optional(),
  TEMPORAL_TLS_SERVER_CA_CERT_PATH: z.string().optional(),
  TEMPORAL_TLS_SERVER_CA_CERT_DATA: z.string().optional(),
  TEMPORAL_TLS_SERVER_NAME: z.string().optional(),
  TEMPORAL_TLS_DISABLE_HOST_VERIFICATION: z.string().optional(),
  /** postgres:// URL; unset means start the embedded PostgreSQL. */
  DATABASE_URL: z.string().min(1).optional(),
  /**
   * postgres:// URL of the ledger schema's owner, used only to run migrations; DATABASE_URL is then
   * the app role's (no DDL: docs/operations.md, Database roles). Unset: migrations run through
   * DATABASE_URL when its role may change the schema, and are only checked when it may not.
   */
  MIGRATION_DATABASE_URL: z.string().min(1).optional(),
  /** Where the embedded servers keep their data. */
  CHARGEGUARD_DATA_DIR: z.string().min(1).default('.data'),
  /** At most the contract's maximum, 10^12 minor units: the ledger declines anything larger (ledger_amount_minor_max). */
  CHARGE_AMOUNT_MINOR_MAX: z.coerce.number().int().min(1).max(limits.amountMinorMaxDefault).default(limits.amountMinorMaxDefault),
  /** How long a charge call waits for the outcome before answering "still processing". */
  CHARGE_WAIT_BUDGET_MS: positiveMs.max(60_000).default(10_000),
  /**
   * Admission: undecided new charges one API (or MCP) process may have in flight; a new key beyond
   * it is refused at once with 503 `overloaded` and Retry-After, nothing recorded or started
   * (src/service/admission.ts; docs/limits.md, Overload).
   */
  CHARGE_ADMISSION_MAX_IN_FLIGHT: z.coerce.number().int().min(1).max(10_000).default(admissionDefaults.maxChargesInFlight),
  /** How long a charge answered 202 still holds its admission slot while undecided, at most. */
  CHARGE_ADMISSION_WATCH_MAX_MS: positiveMs.max(600_000).default(admissionDefaults.releaseWatchMaxMs),
  /**
   * How long a full process asks Temporal whether a key the ledger does not know has a workflow
   * before refusing it (0: not asked; src/service/admission.ts says why that is the default).
   */
  CHARGE_ADMISSION_DESCRIBE_BUDGET_MS: z.coerce.number().int().min(0).max(1_000).default(admissionDefaults.describeBudgetMs),
  /** Workflow task timeout of new charges and refunds (workflows/task-timeouts.ts says why 2 s). */
  WORKFLOW_TASK_TIMEOUT_MS: positiveMs.min(500).max(120_000).default(defaultWorkflowTaskTimeoutMs),
  /**
   * A worker's sticky queue: how long a workflow's next task waits there for the worker that has the
   * workflow cached before any worker may take it (workflows/task-timeouts.ts says why 1 s).
   */
  WORKFLOW_STICKY_SCHEDULE_TO_START_MS: positiveMs.min(100).max(60_000).default(defaultStickyScheduleToStartMs),
  ACTIVITY_START_TO_CLOSE_MS: positiveMs.default(10_000),
  /**
   * The longest wait between two attempts of a ledger step of a new charge: after a database
   * restart, how late at most a charge notices the database is back (docs/operations.md, recovery).
   */
  LEDGER_RETRY_MAX_INTERVAL_MS: positiveMs.min(100).max(10_000).default(500),
  TRY_BUDGET_MS: positiveMs.default(300_000),
  CONFIRM_BUDGET_MS: positiveMs.default(300_000),
  /** Manual capture holds are voided after this long (7 days, as card authorisations). */
  HOLD_TTL_MS: positiveMs.default(7 * 24 * 60 * 60 * 1000),
  LEDGER_POOL_MAX_CONNECTIONS: z.coerce.number().int().min(1).max(500).default(20),
  /**
   * The niceness every thread of a `worker` process runs at (0-19; Linux niceness, higher yields
   * the CPU sooner): on a host shared with an API process the API's refusals go first for the CPU
   * (docs/limits.md, Worker priority). 0 leaves the priority as the process was started with.
   */
  CHARGEGUARD_WORKER_NICENESS: z.coerce.number().int().min(0).max(19).default(5),
  /**
   * The niceness the embedded PostgreSQL and Temporal servers of `start` and `start --cluster` run
   * at (0-19), each with everything it forks: like the worker, the work behind the API yields the
   * CPU to the API's answers on a shared host (docs/limits.md, Worker priority). 0 leaves them as
   * started; external servers (DATABASE_URL, TEMPORAL_ADDRESS) are never touched.
   */
  CHARGEGUARD_EMBEDDED_SERVER_NICENESS: z.coerce.number().int().min(0).max(19).default(5),
  /**
   * How long an API process believes an API key it verified without looking it up again: a key
   * revoked in the database stops authenticating within this (0: looked up on every request).
   * At most a minute, the granularity of a key's recorded last use (src/auth/verified-keys.ts).
   */
  API_KEY_CACHE_TTL_MS: z.coerce.number().int().min(0).max(60_000).default(verifiedKeyTtlMsDefault),
  /** Trys (Confirms) one process runs at once; calls beyond wait and go together in one transaction (src/ledger/step-batches.ts). */
  LEDGER_STEP_BATCH_IN_FLIGHT: z.coerce.number().int().min(1).max(64).default(defaultStepBatchLimits.maxInFlight),
  /** Charges in one batched step; 1 sends every call alone. */
  LEDGER_STEP_BATCH_MAX_SIZE: z.coerce.number().int().min(1).max(64).default(defaultStepBatchLimits.maxBatchSize),
  /**
   * Payload encryption keys, `<id>:<base64 of 32 bytes>` comma-separated, the first encrypting and
   * every one decrypting (docs/back-door.md). Or CHARGEGUARD_PAYLOAD_KEYS_FILE, a file holding them
   * (what the embedded stack generates in the data dir); never both. A process that talks to an
   * external Temporal with neither, and without CHARGEGUARD_PAYLOAD_PLAINTEXT=accept, refuses to start.
   */
  CHARGEGUARD_PAYLOAD_KEYS: z.string().optional().superRefine((value, ctx) => {
    try {
      parsePayloadKeyRing(value);
    } catch (error) {
      ctx.addIssue({ code: 'custom', message: (error as Error).message });
    }
  }),
  CHARGEGUARD_PAYLOAD_KEYS_FILE: z.string().min(1).optional(),
  /** `accept`: payloads in clear are read (and, without keys, written); `refuse` (the default) when keys are set. */
  CHARGEGUARD_PAYLOAD_PLAINTEXT: z.enum(plaintextPolicies).optional(),
  /** Bearer token of the API's /codec endpoint (Temporal's remote codec protocol); unset: no endpoint. */
  CHARGEGUARD_CODEC_TOKEN: z.string().min(codecTokenMinLength).optional(),
  /** Browser origins (the Temporal Web UI's) allowed to call /codec, comma-separated. */
  CHARGEGUARD_CODEC_CORS_ORIGINS: z.string().default('http://127.0.0.1:8233,http://localhost:8233'),
  /**
   * Waiting for Temporal or PostgreSQL at start (worker, API, MCP, start with external servers):
   * the first retry after this delay, doubling up to the max delay, giving up after the budget.
   */
  DEPENDENCY_WAIT_INITIAL_DELAY_MS: positiveMs.default(250),
  DEPENDENCY_WAIT_MAX_DELAY_MS: positiveMs.default(2_000),
  DEPENDENCY_WAIT_BUDGET_MS: positiveMs.default(300_000),
  /**
   * Request rate limits (token buckets shared by every API process through the database) and open
   * holds, per API key (a key's own limits, set with `api-keys create`, win) and per tenant: docs/limits.md.
   */
  RATE_LIMIT_KEY_PER_SECOND: perSecond.default(rateLimitDefaults.keyRatePerSecond),
  RATE_LIMIT_KEY_BURST: burst.default(rateLimitDefaults.keyBurst),
  RATE_LIMIT_TENANT_PER_SECOND: perSecond.default(rateLimitDefaults.tenantRatePerSecond),
  RATE_LIMIT_TENANT_BURST: burst.default(rateLimitDefaults.tenantBurst),
  OPEN_HOLDS_KEY_MAX: openHolds.default(rateLimitDefaults.keyMaxOpenHolds),
  OPEN_HOLDS_TENANT_MAX: openHolds.default(rateLimitDefaults.tenantMaxOpenHolds),
  /**
   * Request rate limits of callers without a valid API key, per source address (the connection's
   * peer: fastify's request.ip, no proxy header trusted): /v1 and /mcp requests without a proven key,
   * webhooks (also per provider), health checks. docs/limits.md, Callers without a key.
   */
  RATE_LIMIT_STRANGER_PER_SECOND: perSecond.default(addressLimitDefaults.strangerRatePerSecond),
  RATE_LIMIT_STRANGER_BURST: burst.default(addressLimitDefaults.strangerBurst),
  RATE_LIMIT_WEBHOOK_ADDRESS_PER_SECOND: perSecond.default(addressLimitDefaults.webhookAddressRatePerSecond),
  RATE_LIMIT_WEBHOOK_ADDRESS_BURST: burst.default(addressLimitDefaults.webhookAddressBurst),
  RATE_LIMIT_WEBHOOK_PROVIDER_PER_SECOND: perSecond.default(addressLimitDefaults.webhookProviderRatePerSecond),
  RATE_LIMIT_WEBHOOK_PROVIDER_BURST: burst.default(addressLimitDefaults.webhookProviderBurst),
  RATE_LIMIT_HEALTH_PER_SECOND: perSecond.default(addressLimitDefaults.healthRatePerSecond),
  RATE_LIMIT_HEALTH_BURST: burst.default(addressLimitDefaults.healthBurst),
  /**
   * Bearer token that lets a caller other than loopback read /metrics; unset: loopback only. As long
   * as the codec's token (src/codec/codec-token.ts), compared the same way, in constant time.
   */
  CHARGEGUARD_METRICS_TOKEN: z.string().min(codecTokenMinLength).optional(),
  /**
   * Browser origins allowed to call /mcp, comma-separated (e.g. https://app.example.com). A request
   * carrying any other Origin is refused with 403 (MCP's DNS rebinding rule); requests without one
   * (non-browser clients) are served. Unset: no browser origin at all.
   */
  MCP_ALLOWED_ORIGINS: z.string().default(''),
  /**
   * Queue intake and the event stream (docs/queues.md): host:port[,host:port…] of a Kafka cluster.
   * Unset: `chargeguard consume` refuses to start, and `start --kafka` starts a broker of its own.
   */
  KAFKA_BROKERS: z.string().min(1).optional(),
  /** The intake's bound on messages of one partition being decided at once (src/queue/settings.ts). */
  INTAKE_MAX_IN_FLIGHT_PER_PARTITION: z.coerce.number().int().min(1).max(1_000).default(16),
  /** How long one intake message waits for its charge's outcome before its result says pending, in ms. */
  INTAKE_OUTCOME_WAIT_MS: positiveMs.max(3_600_000).default(120_000),
  /**
   * Webhook endpoints (OUTBOUND deliveries of events; docs/webhook-endpoints.md, Settings). The
   * outbound door: which URLs and addresses a delivery may reach. Off by default: http URLs,
   * loopback and private network addresses (tests and development turn loopback and http on).
   * Link-local, cloud metadata, unspecified, multicast and reserved addresses are never reached.
   */
  WEBHOOK_ALLOW_HTTP: onOff.default(false),
  WEBHOOK_ALLOW_LOOPBACK: onOff.default(false),
  WEBHOOK_ALLOW_PRIVATE_NETWORKS: onOff.default(false),
  /** One attempt: until connected (TLS included), then until the whole response, and its body's bytes read at most. */
  WEBHOOK_CONNECT_TIMEOUT_MS: positiveMs.max(60_000).default(5_000),
  WEBHOOK_RESPONSE_TIMEOUT_MS: positiveMs.max(120_000).default(15_000),
  WEBHOOK_RESPONSE_MAX_BYTES: z.coerce.number().int().min(0).max(1_048_576).default(65_536),
  /**
   * The retry schedule: exponential backoff with full jitter (a delay drawn uniformly up to a bound
   * that starts at the first delay and doubles per attempt up to the max), for the window; a delivery
   * not delivered by then fails for good. 30 s, 8 h and 3 days by default: about 28 attempts.
   */
  WEBHOOK_RETRY_FIRST_DELAY_MS: positiveMs.default(30_000),
  WEBHOOK_RETRY_MAX_DELAY_MS: positiveMs.default(8 * 60 * 60 * 1000),
  WEBHOOK_RETRY_WINDOW_MS: positiveMs.default(3 * 24 * 60 * 60 * 1000),
  /** An endpoint whose every attempt has failed for this long is disabled, with a webhook_endpoint.disabled event (5 days). */
  WEBHOOK_DISABLE_AFTER_FAILING_MS: positiveMs.default(5 * 24 * 60 * 60 * 1000),
  /** Attempts in flight per worker process, and to one endpoint across all of them. */
  WEBHOOK_DELIVERY_CONCURRENCY: z.coerce.number().int().min(1).max(1_000).default(32),
  WEBHOOK_ENDPOINT_CONCURRENCY: z.coerce.number().int().min(1).max(100).default(4),
  /** How long a claimed delivery is held (must outlast connect + response timeouts): a killed worker's claims expire after it. */
  WEBHOOK_DELIVERY_LEASE_MS: positiveMs.default(60_000),
  /**
   * How often a worker looks for due deliveries: the first attempt's lag (half of it at the median).
   * Each look costs the worker and PostgreSQL a take whatever it finds, so a longer one spreads that
   * over more events: 1 s rather than 250 ms took an endpoint's cost to a charge from about 7 % to
   * about 4 % of P1's throughput (docs/bench.md, One endpoint and the poll interval).
   */
  WEBHOOK_DELIVERY_POLL_MS: positiveMs.max(60_000).default(1_000),
  /** After an attempt finishes, the next claim waits until this long after the last one (unless that one filled an endpoint's slots), so one claim takes several rows (0: claim after each). */
  WEBHOOK_DELIVERY_CLAIM_COALESCE_MS: z.coerce.number().int().min(0).max(1_000).default(50),
  /** Kept-alive connections to receivers: closed after this long idle, and pools (origin and checked address) kept at most. */
  WEBHOOK_KEEP_ALIVE_IDLE_MS: positiveMs.max(60_000).default(4_000),
  WEBHOOK_KEEP_ALIVE_MAX_ORIGINS: z.coerce.number().int().min(1).max(10_000).default(256),
  /** Database connections of a worker's deliverer, apart from the charges' pool. */
  WEBHOOK_DELIVERY_POOL_CONNECTIONS: z.coerce.number().int().min(1).max(50).default(4),
  /**
   * Retention (docs/webhook-endpoints.md, Retention): a delivery that finished (delivered, or failed
   * for good) is deleted with its attempts this long after it finished (30 days; 1 hour at least, so
   * a mistyped value cannot empty what an endpoint's deliveries list shows). Pending ones are kept.
   */
  WEBHOOK_DELIVERY_RETENTION_MS: positiveMs.min(3_600_000).default(30 * 24 * 60 * 60 * 1000),
  /** How often a worker's deliverer prunes finished deliveries past their retention (1 minute). */
  WEBHOOK_DELIVERY_PRUNE_INTERVAL_MS: positiveMs.max(24 * 60 * 60 * 1000).default(60_000),
  /**
   * Where this worker process delivers webhooks: `thread`, on a worker thread of its own
   * (docs/webhook-endpoints.md, Where deliveries run); `on`, on the event loop it shares with the
   * charges' activities; `off`, not at all (another process does).
   */
  WEBHOOK_DELIVERY: z.enum(['thread', 'on', 'off']).default('thread'),
});

export type ChargeguardConfig = z.infer<typeof configSchema>;

export function loadConfig(env: NodeJS.ProcessEnv = process.env): ChargeguardConfig {
  // An empty variable (`TEMPORAL_ADDRESS=`) means unset, as in most shells' idiom.
  const set = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value.trim() !== ''));
  const parsed = configSchema.safeParse(set);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ');
    throw new Error(`invalid configuration: ${problems}`);
  }
  return parsed.data;
}
