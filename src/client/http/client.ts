import createClient, { type Client } from 'openapi-fetch';
import type { components, operations, paths } from './openapi-types.js';
import {
  ChargeDeclinedError,
  ChargePendingError,
  NoAnswerError,
  problemErrorFor,
  UnavailableProblemError,
  type Charge,
  type Problem,
} from './errors.js';

/**
 * A typed client for chargeguard's HTTP API, for agents and services written in TypeScript. The
 * request and response types are generated from the OpenAPI document the app serves
 * (openapi-types.ts, `npm run generate:client`); `raw` is the generated client for every
 * operation. Above it, what every caller of a money API must otherwise get right by hand:
 * - createCharge / createRefund repeat the request with the same idempotency key when no answer
 *   arrives (connection refused or lost, no answer within requestTimeoutMs) or the answer is 429/503,
 *   a bounded number of times with backoff: the server runs it once, a repeat gets its outcome;
 * - a 202 (still processing) is polled at `Location`, honouring `Retry-After`, for at most
 *   pollTotalWaitMs;
 * - problem documents are thrown as typed errors (errors.ts), a declined charge as ChargeDeclinedError;
 * - listCharges pages through a list with `starting_after`.
 * It depends on nothing of the server's code, only on fetch (Node 18+, browsers).
 */

export type CreateChargeRequest = components['schemas']['CreateChargeRequest'];
export type Refund = components['schemas']['Refund'];
export type Account = components['schemas']['Account'];
export type ListChargesQuery = Omit<NonNullable<operations['listCharges']['parameters']['query']>, 'starting_after'>;
export type { Charge, Problem };

/** Every bound of the client, by name with its unit; each may be overridden per client. */
export const clientLimits = {
  /** Attempts of one create or refund, the first included, before it gives up (NoAnswerError or UnavailableProblemError). */
  createAttemptsMax: 5,
  /** The wait before the second attempt; it doubles for each further one (with jitter), up to retryBackoffMaxMs. */
  retryBackoffInitialMs: 250,
  retryBackoffMaxMs: 8_000,
  /**
   * An attempt without an answer within this is abandoned and repeated with the same key. Above
   * the server's default wait budget (CHARGE_WAIT_BUDGET_MS, 30 s), after which it answers 202.
   */
  requestTimeoutMs: 35_000,
  /** How long a 202 is polled in all before ChargePendingError (the charge carries on regardless). */
  pollTotalWaitMs: 120_000,
  /** A Retry-After above this is waited only this long; without one, polls are retryBackoffInitialMs apart. */
  retryAfterMaxMs: 30_000,
};

export type ClientLimits = typeof clientLimits;

export interface ChargeguardClientOptions {
  /** Where the API listens, e.g. http://127.0.0.1:3000 (what `npm start` prints as CHARGEGUARD_API). */
  baseUrl: string;
  /** An API key (`chargeguard api-keys create`): sent as `Authorization: Bearer …`. */
  apiKey: string;
  limits?: Partial<ClientLimits>;
  /** Another fetch (a proxy's, a test's); globalThis.fetch by default. */
  fetch?: (request: Request) => Promise<Response>;
}

export interface CreateChargeOptions {
  /**
   * Reused verbatim on every attempt. Choose one per intent (e.g. from your order id) and keep it:
   * if this call throws NoAnswerError, call again with the same key. A random one when left out.
   */
  idempotencyKey?: string;
  /** `Prefer: wait=N`: answer 202 after N seconds instead of the server's whole wait budget. */
  waitSeconds?: number;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class ChargeguardClient {
  /** The generated client (openapi-fetch) for every operation, typed by path and method; it throws nothing for problem answers. */
  readonly raw: Client<paths>;
  readonly limits: ClientLimits;
  private readonly baseUrl: string;
  private readonly fetchImpl: (request: Request) => Promise<Response>;
  private readonly authorization: string;

  constructor(options: ChargeguardClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.limits = { ...clientLimits, ...options.limits };
    this.authorization = `Bearer ${options.apiKey}`;
    this.fetchImpl = options.fetch ?? ((request) => globalThis.fetch(request));
    this.raw = createClient<paths>({ baseUrl: this.baseUrl, headers: { authorization: this.authorization }, fetch: this.fetchImpl });
  }

  /**
   * Creates a charge exactly once and returns it decided (succeeded, reserved, cancelled), or
   * waiting for its payer (requires_action). Throws ChargeDeclinedError for a decline, a typed
   * ProblemError for a refusal, ChargePendingError if it is still pending after pollTotalWaitMs,
   * NoAnswerError if no attempt got an answer (repeat with the same key).
   */
  async createCharge(body: CreateChargeRequest, options: CreateChargeOptions = {}): Promise<Charge> {
    const idempotencyKey = options.idempotencyKey ?? `cg-${globalThis.crypto.randomUUID()}`;
    const prefer = options.waitSeconds === undefined ? {} : { prefer: `wait=${Math.max(0, Math.floor(options.waitSeconds))}` };
    const answer = await this.withRetries(idempotencyKey, (signal) =>
      this.raw.POST('/v1/charges', { params: { header: { 'idempotency-key': idempotencyKey } }, body, headers: prefer, signal }),
    );
    let charge = answer.data as Charge;
    // 202: not decided when the server's wait ended (whatever the body's status says by then), or
    // waiting for the payer (requires_action: returned, for the caller to hand next_action on).
    if (answer.response.status === 202 && charge.status !== 'requires_action') {
      charge = await this.pollCharge(answer.response.headers.get('location') ?? chargePath(idempotencyKey), retryAfterMsOf(answer.response, this.limits));
    }
    if (charge.status === 'declined') throw new ChargeDeclinedError(charge);
    return charge;
  }

  /** Refunds a succeeded charge (all that is left, or `amount`), exactly once per refund key, with the create's retries. */
  async createRefund(chargeKey: string, refundKey: string, amount?: number): Promise<Refund> {
    const answer = await this.withRetries(refundKey, (signal) =>
      this.raw.POST('/v1/charges/{key}/refunds', {
        params: { path: { key: chargeKey }, header: { 'idempotency-key': refundKey } },
        body: amount === undefined ? {} : { amount },
        signal,
      }),
    );
    return answer.data as Refund;
  }

  async getCharge(key: string): Promise<Charge> {
    return this.unwrap(await this.raw.GET('/v1/charges/{key}', { params: { path: { key } } }));
  }

  async cancelCharge(key: string): Promise<Charge> {
    return this.unwrap(await this.raw.POST('/v1/charges/{key}/cancel', { params: { path: { key } }, body: {} }));
  }

  async captureCharge(key: string, amount?: number): Promise<Charge> {
    return this.unwrap(await this.raw.POST('/v1/charges/{key}/capture', { params: { path: { key } }, body: amount === undefined ? {} : { amount } }));
  }

  async getAccount(id: string): Promise<Account> {
    return this.unwrap(await this.raw.GET('/v1/accounts/{id}', { params: { path: { id } } }));
  }

  /**
   * Every charge the query finds, newest first, fetched a page (`limit`) at a time: each page
   * starts after the last object of the one before. `cursor` picks what names that object: its
   * `id`, as in Stripe (the default), or its `idempotency_key`.
   */
  listCharges(query: ListChargesQuery = {}, options: { cursor?: (charge: Charge) => string } = {}): AsyncGenerator<Charge> {
    return paginate(
      async (startingAfter) =>
        this.unwrap(
          await this.raw.GET('/v1/charges', { params: { query: { ...query, ...(startingAfter === undefined ? {} : { starting_after: startingAfter }) } } }),
        ),
      options.cursor ?? ((charge) => charge.id),
    );
  }

  /**
   * Runs a keyed POST until it answers something other than 429/503, or attempts run out: each
   * attempt with the same key, abandoned after requestTimeoutMs, the next after a backoff (or the
   * answer's Retry-After, if longer). A problem answer is thrown as its typed error.
   */
  private async withRetries<R extends { data?: unknown; error?: unknown; response: Response }>(
    idempotencyKey: string,
    attempt: (signal: AbortSignal) => Promise<R>,
  ): Promise<R & { data: NonNullable<R['data']> }> {
    const { createAttemptsMax, requestTimeoutMs } = this.limits;
    let lastFailure: unknown;
    for (let attemptNumber = 1; attemptNumber <= createAttemptsMax; attemptNumber += 1) {
      let answer: R;
      try {
        answer = await attempt(AbortSignal.timeout(requestTimeoutMs));
      } catch (noAnswer) {
        // Connection refused or lost, or timed out: whether the server ran it is unknown, so the
        // same key goes again; the server runs a key once and answers a repeat with its outcome.
        lastFailure = noAnswer;
        if (attemptNumber < createAttemptsMax) await sleep(this.backoffMs(attemptNumber));
        continue;
      }
      const status = answer.response.status;
      if (status === 429 || status === 503) {
        lastFailure = this.problemOf(answer);
        if (attemptNumber < createAttemptsMax) await sleep(Math.max(this.backoffMs(attemptNumber), retryAfterMsOf(answer.response, this.limits)));
        continue;
      }
      return this.unwrapAnswer(answer);
    }
    if (lastFailure instanceof UnavailableProblemError) throw lastFailure;
    throw new NoAnswerError(idempotencyKey, createAttemptsMax, lastFailure);
  }

  /** Reads the charge at `location` until it is no longer pending, for at most pollTotalWaitMs. */
  private async pollCharge(location: string, firstWaitMs: number): Promise<Charge> {
    const deadline = Date.now() + this.limits.pollTotalWaitMs;
    let waitMs = firstWaitMs;
    let last: Charge | undefined;
    for (;;) {
      const remainingMs = deadline - Date.now();
      if (remainingMs <= 0) break;
      await sleep(Math.min(waitMs, remainingMs));
      let response: Response;
      try {
        response = await this.fetchImpl(
          new Request(new URL(location, `${this.baseUrl}/`), {
            headers: { authorization: this.authorization, accept: 'application/json' },
            signal: AbortSignal.timeout(this.limits.requestTimeoutMs),
          }),
        );
      } catch {
        // No answer to a read: read again at the next poll, within the same total wait.
        waitMs = this.limits.retryBackoffInitialMs;
        continue;
      }
      waitMs = retryAfterMsOf(response, this.limits);
      const parsed = (await response.json().catch(() => undefined)) as unknown;
      if (response.status === 429 || response.status === 503) continue;
      if (!response.ok) throw problemErrorFor(asProblem(parsed, response), retryAfterSecondsOf(response));
      last = parsed as Charge;
      if (last.status !== 'pending') return last;
    }
    if (last === undefined) last = await this.getCharge(decodeURIComponent(location.split('/').pop() ?? ''));
    if (last.status !== 'pending') return last;
    throw new ChargePendingError(last);
  }

  private backoffMs(attemptNumber: number): number {
    const ceiling = Math.min(this.limits.retryBackoffMaxMs, this.limits.retryBackoffInitialMs * 2 ** (attemptNumber - 1));
    // Jitter: many agents retrying after one outage do not come back in step.
    return Math.round(ceiling * (0.5 + Math.random() / 2));
  }

  private problemOf(answer: { error?: unknown; response: Response }) {
    return problemErrorFor(asProblem(answer.error, answer.response), retryAfterSecondsOf(answer.response));
  }

  private unwrapAnswer<R extends { data?: unknown; error?: unknown; response: Response }>(answer: R): R & { data: NonNullable<R['data']> } {
    if (!answer.response.ok || answer.data === undefined) throw this.problemOf(answer);
    return answer as R & { data: NonNullable<R['data']> };
  }

  private unwrap<T>(answer: { data?: T; error?: unknown; response: Response }): T {
    return this.unwrapAnswer(answer).data as T;
  }
}

/**
 * Pages through a list route: `page(startingAfter)` fetches one page; the next starts after the
 * cursor of the last object of this one, until `has_more` is false (or a page is empty).
 */
export async function* paginate<T>(
  page: (startingAfter: string | undefined) => Promise<{ data: T[]; has_more: boolean }>,
  cursor: (item: T) => string,
): AsyncGenerator<T> {
  let startingAfter: string | undefined;
  for (;;) {
    const { data, has_more: hasMore } = await page(startingAfter);
    yield* data;
    const last = data.at(-1);
    if (!hasMore || last === undefined) return;
    startingAfter = cursor(last);
  }
}

function chargePath(key: string): string {
  return `/v1/charges/${encodeURIComponent(key)}`;
}

function retryAfterSecondsOf(response: Response): number | undefined {
  const header = response.headers.get('retry-after');
  return header !== null && /^\d+$/.test(header.trim()) ? Number(header.trim()) : undefined;
}

function retryAfterMsOf(response: Response, limits: ClientLimits): number {
  const seconds = retryAfterSecondsOf(response);
  return seconds === undefined ? limits.retryBackoffInitialMs : Math.min(seconds * 1000, limits.retryAfterMaxMs);
}

/** The problem document of an answer; one made up from the status when the body is not one (a proxy's 502). */
function asProblem(body: unknown, response: Response): Problem {
  if (body !== null && typeof body === 'object' && typeof (body as Problem).type === 'string') return body as Problem;
  return { type: 'http_error', title: response.statusText || 'HTTP error', status: response.status, detail: `HTTP ${response.status}` } as Problem;
}
