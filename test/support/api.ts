import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, inject } from 'vitest';
import type { ApiOptions } from '../../src/api/app.js';
import { buildHttpApp, type HttpAppOptions } from '../../src/cli/http-app.js';
import { createApiKey } from '../../src/auth/api-keys.js';
import type { Role } from '../../src/domain/permissions.js';
import { loadConfig } from '../../src/config.js';
import type { LedgerPool } from '../../src/ledger/pool.js';
import { openAppContext, policyFromConfig, type RuntimeContext } from '../../src/runtime/app-context.js';
import { ChargeService } from '../../src/service/charge-service.js';
import type { ChargePolicy } from '../../workflows/definitions.js';
import { fundedTenant, lateBound, testPayloadSettings, type FundedTenantOptions } from './harness.js';

/** A real API on a loopback port in front of the shared test stack (or another Temporal). */
export interface TestApi {
  app: FastifyInstance;
  context: RuntimeContext;
  baseUrl: string;
  /** A fresh API key for the tenant, created as the CLI would: an agent key unless `role` says admin. */
  keyFor(tenant: string, role?: Role): Promise<string>;
  /** fetch() against the API with the tenant's key (or none / another header when given). */
  request(path: string, init?: { method?: string; body?: unknown; rawBody?: string; headers?: Record<string, string>; apiKey?: string | null }): Promise<TestResponse>;
  close(): Promise<void>;
}

export interface TestResponse {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

export type TestApiOptions = Partial<Omit<ApiOptions, 'context'>> & HttpAppOptions & {
  temporalAddress?: string;
  /** Added to the configuration; payload settings given here replace the run's key file. */
  env?: Record<string, string>;
  /** Compare the payload keys with the shared worker's at start (openAppContext); default true. */
  checkWorkerKeys?: boolean;
  /**
   * Charges go to this task queue (a worker of the test's own, e.g. with a provider connector)
   * with this policy, instead of the shared worker's queue and the configuration's policy.
   */
  charges?: { taskQueue: string; policy?: ChargePolicy };
};

const payloadSettingNames = ['CHARGEGUARD_PAYLOAD_KEYS', 'CHARGEGUARD_PAYLOAD_KEYS_FILE', 'CHARGEGUARD_PAYLOAD_PLAINTEXT'];

/**
 * Tests make hundreds of requests a second with one key (100 concurrent charges, 100 token uses):
 * the test API's limits are far above the production defaults (src/domain/rate-limits.ts), which
 * test/api-rate-limits.test.ts and test/api-stranger-limits.test.ts exercise by setting their own through `env`.
 */
export const generousRateLimits = {
  RATE_LIMIT_KEY_PER_SECOND: '100000',
  RATE_LIMIT_KEY_BURST: '100000',
  RATE_LIMIT_TENANT_PER_SECOND: '100000',
  RATE_LIMIT_TENANT_BURST: '100000',
  OPEN_HOLDS_KEY_MAX: '100000',
  OPEN_HOLDS_TENANT_MAX: '100000',
  // Every test API is reached from 127.0.0.1, so all of them share its source address buckets.
  RATE_LIMIT_STRANGER_PER_SECOND: '100000',
  RATE_LIMIT_STRANGER_BURST: '100000',
  RATE_LIMIT_WEBHOOK_ADDRESS_PER_SECOND: '100000',
  RATE_LIMIT_WEBHOOK_ADDRESS_BURST: '100000',
  RATE_LIMIT_WEBHOOK_PROVIDER_PER_SECOND: '100000',
  RATE_LIMIT_WEBHOOK_PROVIDER_BURST: '100000',
  RATE_LIMIT_HEALTH_PER_SECOND: '100000',
  RATE_LIMIT_HEALTH_BURST: '100000',
} as const;

/**
 * How long a test API's Temporal calls may take (an update such as a cancel, a query; and the start
 * of a ChargeService the test API builds itself, `charges`): six times the service's default of 5 s.
 * The run shares one Temporal dev server between two test files at a time on two cores; a CI run
 * once answered a 3-D Secure test's cancel, and the next test's create, with 503 at 5 s. A 503 is
 * the service's correct answer to a slow Temporal, not what those files test; tests of that answer
 * set their own bound (api-outage.test.ts). A call that hangs still fails, after 30 s.
 */
export const testTemporalCallTimeoutMs = 30_000;

export async function openTestApi(options: TestApiOptions = {}): Promise<TestApi> {
  const stack = inject('stack');
  const ownPayloadSettings = Object.keys(options.env ?? {}).some((name) => payloadSettingNames.includes(name));
  const config = loadConfig({
    CHARGE_WAIT_BUDGET_MS: '30000',
    ...generousRateLimits,
    ...(ownPayloadSettings ? {} : testPayloadSettings()),
    ...options.env,
  });
  const shared = await openAppContext(
    config,
    { temporalAddress: options.temporalAddress ?? stack.temporalAddress, databaseUrl: stack.databaseUrl },
    { checkWorkerKeys: options.checkWorkerKeys },
  );
  const context: RuntimeContext = options.charges
    ? {
        ...shared,
        charges: new ChargeService({
          temporal: shared.temporal,
          ledger: shared.ledger,
          policy: options.charges.policy ?? policyFromConfig(config),
          amountMinorMax: config.CHARGE_AMOUNT_MINOR_MAX,
          waitBudgetMs: config.CHARGE_WAIT_BUDGET_MS,
          taskQueue: options.charges.taskQueue,
          startTimeoutMs: testTemporalCallTimeoutMs,
        }),
      }
    : shared;
  const app = await buildHttpApp({ temporalCallTimeoutMs: testTemporalCallTimeoutMs, ...options, context });
  const baseUrl = await listenOnLoopback(app);
  return {
    app,
    context,
    baseUrl,
    keyFor: (tenant, role) => apiKeyFor(context.ledger, tenant, role),
    request: (path, init = {}) => send(baseUrl, path, init),
    close: async () => {
      await app.close();
      await context.close();
    },
  };
}

/** The API of one test file: started before its tests, closed after them. */
export function useApi(options: TestApiOptions = {}): TestApi {
  let api: TestApi | undefined;
  beforeAll(async () => {
    api = await openTestApi(options);
  });
  afterAll(async () => {
    await api?.close();
  });
  return lateBound('the API', () => api);
}

/**
 * A funded tenant (as fundedTenant makes it) and an API key for it: an agent key (charges, refunds,
 * reads), or an admin key with `role: 'admin'` for tests that open accounts or deposit over the API.
 */
export async function fundedApiTenant(
  api: TestApi,
  options: FundedTenantOptions & { role?: Role },
): Promise<{ tenant: string; apiKey: string }> {
  const tenant = await fundedTenant(api.context.ledger, options);
  return { tenant, apiKey: await api.keyFor(tenant, options.role) };
}

/** A fresh API key for the tenant, created as the CLI would: an agent key unless `role` says admin. */
export async function apiKeyFor(ledger: LedgerPool, tenant: string, role: Role = 'agent'): Promise<string> {
  return (await createApiKey(ledger, tenant, 'test', role)).key;
}

/** Starts the app on a free loopback port; the base URL to send requests to. */
export async function listenOnLoopback(app: FastifyInstance): Promise<string> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('API is not listening on a TCP port');
  return `http://127.0.0.1:${address.port}`;
}

export async function send(
  baseUrl: string,
  path: string,
  init: { method?: string; body?: unknown; rawBody?: string; headers?: Record<string, string>; apiKey?: string | null } = {},
): Promise<TestResponse> {
  const headers: Record<string, string> = { ...init.headers };
  if (init.apiKey) headers.authorization = `Bearer ${init.apiKey}`;
  let body: string | undefined = init.rawBody;
  if (init.body !== undefined) body = JSON.stringify(init.body);
  if (body !== undefined && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-type')) {
    headers['content-type'] = 'application/json';
  }
  const response = await fetch(`${baseUrl}${path}`, { method: init.method ?? (body === undefined ? 'GET' : 'POST'), headers, body });
  const text = await response.text();
  let parsed: unknown = undefined;
  try {
    parsed = text === '' ? undefined : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: response.status, headers: response.headers, body: parsed, text };
}
