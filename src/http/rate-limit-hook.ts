import type { FastifyReply, FastifyRequest } from 'fastify';
import type { Principal } from '../auth/principal.js';
import { RateLimitedError } from '../domain/errors.js';
import {
  type AddressLimitConfig,
  type RateLimitConfig,
  addressLimitSettingsFrom,
  rateLimitSettingsFrom,
  type Admission,
  type AddressAdmissionRequest,
  type AddressLimitSettings,
  type RateLimitSettings,
} from '../auth/rate-limits.js';
import { ProvenKeys, provenKeysMax } from '../auth/proven-keys.js';
import { idempotencyKeyPattern } from '../domain/limits.js';
import { providerPattern } from '../domain/identifiers.js';
import { chargeWorkflowId } from '../domain/charge.js';
import { limitSubjectOf } from './source-address.js';
import { addServerTiming } from './server-timing.js';

declare module 'fastify' {
  interface FastifyRequest {
    /**
     * Set by the rate-limit hook on a charge create: its charge key and whether the ledger had a
     * charge under it when the limiter's statement ran (null otherwise). The charge's admission
     * check uses it instead of reading the ledger again.
     */
    chargeKeyInLedger: { key: string; known: boolean } | null;
  }
}

/**
 * What the hooks need of the application: its settings, and where the buckets are taken (the
 * ledger, so that limits hold across replicas). Declared here, below the surfaces and the runtime,
 * and satisfied by the application context (src/runtime/app-context.ts), which src/http never imports.
 */
export interface RateLimitedApp {
  /** The settings the limits are read from: src/config.ts's, which satisfy both. */
  config: RateLimitConfig & AddressLimitConfig;
  limits: {
    admitRequest(settings: RateLimitSettings, principal: Principal, what: { cost: number; chargeKeys?: readonly string[] }): Promise<Admission>;
    peekRequest(
      settings: RateLimitSettings,
      principal: Principal,
      what: { cost: number; chargeKeys: readonly string[] },
    ): Promise<{ tokensThere: boolean; knownCharges: number }>;
    admitByAddress(settings: AddressLimitSettings, request: AddressAdmissionRequest): Promise<Admission>;
  };
  /** This process's bound on new charges in flight (src/service/admission.ts); null: none. */
  charges: { readonly admission: FullProcess | null };
}

/** What the hook asks of the admission bound: whether a new charge would be refused now, and that refusal. */
export interface FullProcess {
  refusesNew(workflowId: string): boolean;
  refusal(): Error;
}

/**
 * Judges one request (or the extra calls of an MCP batch) against its key's and tenant's limits:
 * sets the RateLimit-Policy and RateLimit fields on the reply (answered on success too, so a client
 * can slow down before it is refused) and throws the refusal, which the error handler answers with
 * 429 and Retry-After. The time spent is reported as a Server-Timing metric named `ratelimit`.
 * Answers the admission, whose `knownCharges` says which charge keys the ledger knew.
 */
export async function admit(
  context: RateLimitedApp,
  settings: RateLimitSettings,
  request: FastifyRequest,
  reply: FastifyReply,
  what: { cost: number; chargeKeys?: readonly string[] },
): Promise<Admission> {
  const startedAt = performance.now();
  const admission = await context.limits.admitRequest(settings, request.principal, what);
  reply.headers(admission.headers);
  addServerTiming(reply, 'ratelimit', startedAt);
  if (admission.refusal) throw admission.refusal;
  return admission;
}

/**
 * The charge a POST /v1/charges would create, named by its Idempotency-Key or else by its
 * Idempotency-Token (a redeemed token becomes the charge's key); none for other routes, or when
 * neither header is well-formed (the route refuses that with 400, and nothing is held).
 */
function chargeKeyOf(request: FastifyRequest): string[] {
  if (request.routeOptions.config.operation !== 'charges.create') return [];
  const named = request.headers['idempotency-key'] ?? request.headers['idempotency-token'];
  return typeof named === 'string' && idempotencyKeyPattern.test(named) ? [named] : [];
}

/**
 * The hook for the tenant scope, registered right after authentication: an unauthenticated request
 * was refused (401, or 429 by its source address's limit) before it, so it spends no key's tokens. Every /v1 and /mcp request costs one
 * token, replays included; a charge create (POST /v1/charges) also has the open holds of its key
 * and tenant checked, unless the ledger already knows its Idempotency-Key (a replay holds nothing new);
 * what the ledger said about the key is kept on the request (`chargeKeyInLedger`) for the charge's
 * admission. A malformed Idempotency-Key is left for the route to refuse with 400.
 */
export function rateLimitHook(context: RateLimitedApp): (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  const settings = rateLimitSettingsFrom(context.config);
  return async (request, reply) => {
    const chargeKeys = chargeKeyOf(request);
    if (chargeKeys.length === 1) await refuseAtFullProcess(context, settings, request, reply, chargeKeys[0]!);
    const admission = await admit(context, settings, request, reply, { cost: 1, chargeKeys });
    if (chargeKeys.length === 1) request.chargeKeyInLedger = { key: chargeKeys[0]!, known: admission.knownCharges > 0 };
  };
}

/**
 * A charge create with a key this process has not admitted, while every admission place is taken
 * (docs/limits.md, Overload): decided from a read that locks and writes nothing, instead of the
 * take, whose row locks every request of the key and the tenant waits for. Refused 503
 * `overloaded` when the ledger does not know the key and the key's and tenant's buckets hold a
 * token; the request's token is then taken after the answer, so a caller that keeps sending to a
 * full service drains its bucket as before and is refused 429 once it is empty. A known key (a
 * replay, admitted first) and a caller out of tokens go on to the take as any request does. Timed
 * as Server-Timing `admission`.
 */
async function refuseAtFullProcess(
  context: RateLimitedApp,
  settings: RateLimitSettings,
  request: FastifyRequest,
  reply: FastifyReply,
  key: string,
): Promise<void> {
  const admission = context.charges.admission;
  if (admission === null || !admission.refusesNew(chargeWorkflowId(request.principal.tenant, key))) return;
  const startedAt = performance.now();
  const peek = await context.limits.peekRequest(settings, request.principal, { cost: 1, chargeKeys: [key] });
  addServerTiming(reply, 'admission', startedAt);
  if (peek.knownCharges > 0 || !peek.tokensThere) return;
  const principal = request.principal;
  void context.limits.admitRequest(settings, principal, { cost: 1 }).then(
    () => undefined,
    (error: unknown) => request.log.warn({ err: error }, 'taking the token of a request refused as overloaded failed'),
  );
  throw admission.refusal();
}

/** The settings the hook judges by, for the MCP route's extra calls. */
export function mcpRateLimitSettings(context: RateLimitedApp): RateLimitSettings {
  return rateLimitSettingsFrom(context.config);
}

/** What one app judges callers without a valid key by: its settings, and the keys proven in this process. */
export interface AddressLimiter {
  settings: AddressLimitSettings;
  provenKeys: ProvenKeys;
}

const addressLimiters = new WeakMap<RateLimitedApp, AddressLimiter>();

/** The app's address limiter, made on first use (every hook of one app shares its proven keys). */
export function addressLimiterFor(context: RateLimitedApp): AddressLimiter {
  let limiter = addressLimiters.get(context);
  if (!limiter) {
    limiter = { settings: addressLimitSettingsFrom(context.config), provenKeys: new ProvenKeys(provenKeysMax) };
    addressLimiters.set(context, limiter);
  }
  return limiter;
}

/**
 * Judges a request by its source address's bucket (and a webhook's provider's): sets the RateLimit
 * fields and throws the refusal (429 with Retry-After), before the request costs anything else.
 * Timed into Server-Timing `ratelimit`, as admit is.
 */
export async function admitFromAddress(
  context: RateLimitedApp,
  request: FastifyRequest,
  reply: FastifyReply,
  what: { kind: 'stranger' | 'health' } | { kind: 'webhook'; provider: string | null },
): Promise<void> {
  const startedAt = performance.now();
  const address = limitSubjectOf(request.ip);
  const judged: AddressAdmissionRequest = what.kind === 'webhook' ? { ...what, address } : { kind: what.kind, address };
  const admission = await context.limits.admitByAddress(addressLimiterFor(context).settings, judged);
  reply.headers(admission.headers);
  addServerTiming(reply, 'ratelimit', startedAt);
  if (admission.refusal) throw admission.refusal;
}

/**
 * POST /v1/webhooks/{provider}: one token of the source address's webhook bucket, then one of the
 * provider's, before the body is read and before any signature is computed. A provider name the
 * route would refuse (400) takes from the address's bucket only: made-up names make no rows.
 */
export function webhookRateLimitHook(context: RateLimitedApp): (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  return async (request, reply) => {
    const { provider } = request.params as { provider?: unknown };
    const named = typeof provider === 'string' && providerPattern.test(provider) ? provider : null;
    await admitFromAddress(context, request, reply, { kind: 'webhook', provider: named });
  };
}

/** How long a health probe waits for its limiter before it is served anyway: a fraction of a probe's usual 1 s timeout. */
export const healthLimiterBudgetMs = 250;

/**
 * /healthz and /readyz: one token of the source address's health bucket. Fails open: when the
 * limiter cannot answer within healthLimiterBudgetMs (the database is down or slow), the probe is
 * served, so liveness never depends on PostgreSQL and readiness reports an outage itself rather
 * than as a limiter error.
 */
export function healthRateLimitHook(context: RateLimitedApp): (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  return async (request, reply) => {
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        admitFromAddress(context, request, reply, { kind: 'health' }),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, healthLimiterBudgetMs);
        }),
      ]);
    } catch (error) {
      if (error instanceof RateLimitedError) throw error;
    } finally {
      clearTimeout(timer);
    }
  };
}
