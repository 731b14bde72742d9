/**
 * A stateful Stripe simulator: the subset of Stripe's API the Stripe connector uses, over HTTP on
 * loopback, so the official SDK can be pointed at it (`host`, `port`, `protocol: 'http'`). Unlike
 * stripe-mock (stateless, schema only), it keeps payments, keys and events, so retries, replays and
 * faults can be tested end to end (docs/providers.md).
 *
 * Control: the `StripeSimulator` methods, or the same over `/_simulator/*` for other processes.
 */
import type { IncomingMessage } from 'node:http';
import { setTimeout as delay } from 'node:timers/promises';
import canonicalizeExport from 'canonicalize';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import qs from 'qs';
import { z } from 'zod';
import { type Fault, type FaultRuleInput, Faults, faultRuleSchema, type Operation } from './faults.js';
import { IdempotencyKeys } from './idempotency.js';
import { stripeLikeId } from './ids.js';
import { type ApiAnswer, type Params, Payments, stripeError, validationError } from './payments.js';
import { type WebhookConfigInput, WebhookSender, webhookConfigSchema } from './webhooks.js';

const canonicalize = canonicalizeExport as unknown as (input: unknown) => string | undefined;

/** Stripe's own retention: keys are pruned after 24 hours. */
export const simulatorKeyRetentionMs = 24 * 60 * 60 * 1000;
/**
 * How long after creation a payment becomes visible to search: Stripe documents "under a minute"
 * in normal operation (search is eventually consistent; list is not).
 */
export const simulatorSearchIndexLagMs = 60 * 1000;
/** The API version events carry when a request names none. */
const defaultApiVersion = '2026-10-28.endive';
/** Stripe's largest list page, and its default. */
const maxListLimit = 100;
const defaultListLimit = 10;

export interface StripeSimulatorOptions {
  /** 0 (default): any free port. The simulator binds 127.0.0.1 only. */
  port?: number;
  /** Secret keys it accepts; any `sk_test_…` key when absent. */
  apiKeys?: readonly string[];
  keyRetentionMs?: number;
  searchIndexLagMs?: number;
  webhooks?: WebhookConfigInput;
  /**
   * A fixed delay before each API request is handled (the `/_simulator/*` control routes are never
   * delayed): a provider's round trip, for benchmarks that price a charge with the provider in the
   * loop. 0 (default): answered at once.
   */
  responseDelayMs?: number;
}

interface RequestLogEntry {
  operation: Operation;
  method: string;
  path: string;
  idempotencyKey: string | null;
  /** The status sent, or `dropped`. */
  status: number | 'dropped';
  replayed: boolean;
  fault: Fault['kind'] | null;
  /** When it was answered (or dropped), by the simulator's clock. */
  atMs: number;
}

export class StripeSimulator {
  readonly faults = new Faults();
  readonly payments: Payments;
  readonly keys: IdempotencyKeys;
  readonly webhooks: WebhookSender;
  readonly requests: RequestLogEntry[] = [];
  private clockOffsetMs = 0;
  private readonly searchIndexLagMs: number;

  private constructor(
    private readonly app: FastifyInstance,
    readonly port: number,
    private readonly options: StripeSimulatorOptions,
  ) {
    const now = (): number => this.nowMs();
    this.payments = new Payments(now);
    this.keys = new IdempotencyKeys(now, options.keyRetentionMs ?? simulatorKeyRetentionMs);
    this.webhooks = new WebhookSender(now, defaultApiVersion);
    if (options.webhooks) this.webhooks.configure(options.webhooks);
    this.searchIndexLagMs = options.searchIndexLagMs ?? simulatorSearchIndexLagMs;
  }

  static async start(options: StripeSimulatorOptions = {}): Promise<StripeSimulator> {
    const app = Fastify({
      logger: false,
      // Held requests must not keep stop() waiting.
      forceCloseConnections: true,
      // Stripe's bracket notation (metadata[tenant]=…, list[0]=…), parsed as Stripe's servers do.
      routerOptions: { querystringParser: (text: string) => qs.parse(text) },
    });
    app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => {
      done(null, qs.parse(body as string));
    });
    let simulator: StripeSimulator | null = null;
    const ready = (): StripeSimulator => {
      if (!simulator) throw new Error('simulator not started');
      return simulator;
    };
    const responseDelayMs = options.responseDelayMs ?? 0;
    if (!Number.isFinite(responseDelayMs) || responseDelayMs < 0) {
      throw new Error(`responseDelayMs must be a finite number of milliseconds ≥ 0, got ${responseDelayMs}`);
    }
    if (responseDelayMs > 0) {
      app.addHook('onRequest', async (request) => {
        if (!request.url.startsWith('/_simulator/')) await delay(responseDelayMs);
      });
    }
    registerApiRoutes(app, ready);
    registerControlRoutes(app, ready);
    await app.listen({ host: '127.0.0.1', port: options.port ?? 0 });
    const address = app.server.address();
    if (address === null || typeof address === 'string') throw new Error(`unexpected listen address ${String(address)}`);
    simulator = new StripeSimulator(app, address.port, options);
    return simulator;
  }

  get host(): string {
    return '127.0.0.1';
  }

  get url(): string {
    return `http://${this.host}:${this.port}`;
  }

  /** What the Stripe connector (or any Stripe SDK) takes to talk to this server. */
  get endpoint(): { host: string; port: number; protocol: 'http' } {
    return { host: this.host, port: this.port, protocol: 'http' };
  }

  /** The simulator's clock: real time plus whatever `advanceClock` added. */
  nowMs(): number {
    return Date.now() + this.clockOffsetMs;
  }

  /** Moves the simulator's clock on (key retention, search lag), without waiting. */
  advanceClock(ms: number): void {
    this.clockOffsetMs += ms;
  }

  addFault(rule: FaultRuleInput): void {
    this.faults.add(rule);
  }

  releaseHolds(): number {
    return this.faults.releaseHolds();
  }

  configureWebhooks(config: WebhookConfigInput | null): void {
    this.webhooks.configure(config);
  }

  apiKeyAccepted(key: string): boolean {
    return this.options.apiKeys ? this.options.apiKeys.includes(key) : key.startsWith('sk_test_');
  }

  searchVisible(createdMs: number): boolean {
    return this.nowMs() - createdMs >= this.searchIndexLagMs;
  }

  async stop(): Promise<void> {
    this.faults.releaseHolds();
    this.webhooks.stop();
    await this.app.close();
  }
}

type Ready = () => StripeSimulator;

function apiKeyOf(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  if (!header) return null;
  if (header.startsWith('Bearer ')) return header.slice('Bearer '.length);
  if (header.startsWith('Basic ')) return Buffer.from(header.slice('Basic '.length), 'base64').toString('utf8').split(':')[0] ?? null;
  return null;
}

function headerOf(request: FastifyRequest, name: string): string | null {
  const value = request.headers[name];
  return typeof value === 'string' ? value : null;
}

function paramsOf(request: FastifyRequest): Params {
  const body = request.body;
  return body !== null && typeof body === 'object' ? (body as Params) : {};
}

/** Ends the exchange without an answer: the caller sees its connection reset. */
function dropConnection(reply: FastifyReply): void {
  reply.hijack();
  const raw: IncomingMessage = reply.request.raw;
  raw.socket.destroy();
}

function send(reply: FastifyReply, answer: ApiAnswer, requestId: string, extraHeaders: Record<string, string> = {}): FastifyReply {
  return reply
    .code(answer.status)
    .header('request-id', requestId)
    .headers(extraHeaders)
    .header('content-type', 'application/json')
    .send(JSON.stringify(answer.body));
}

interface Mutation {
  operation: Operation;
  /** Validation before anything runs; a refusal here saves nothing under the key. */
  validate: () => ApiAnswer | null;
  run: () => { answer: ApiAnswer; events: { type: string; object: Record<string, unknown> }[] };
}

/**
 * One POST, in Stripe's order: authenticate, rate limit, the key, validation, execution (commit),
 * the answer. Faults strike at their named points.
 */
async function handleMutation(ready: Ready, request: FastifyRequest, reply: FastifyReply, mutation: Mutation): Promise<FastifyReply> {
  const sim = ready();
  const requestId = stripeLikeId('req');
  const idempotencyKey = headerOf(request, 'idempotency-key');
  const log = (status: number | 'dropped', replayed: boolean, fault: Fault | null): void => {
    sim.requests.push({ operation: mutation.operation, method: request.method, path: request.url, idempotencyKey, status, replayed, fault: fault?.kind ?? null, atMs: sim.nowMs() });
  };
  const key = apiKeyOf(request);
  if (key === null || !sim.apiKeyAccepted(key)) {
    log(401, false, null);
    return send(reply, stripeError(401, { type: 'invalid_request_error', message: `Invalid API Key provided: ${key ?? '(none)'}` }), requestId);
  }
  const fault = sim.faults.take(mutation.operation, idempotencyKey);
  if (fault?.kind === 'rate_limit') {
    log(429, false, fault);
    return send(reply, stripeError(429, { type: 'invalid_request_error', code: 'rate_limit', message: 'Request rate limit exceeded.' }), requestId);
  }
  if (fault?.kind === 'error_before_commit') {
    log(fault.status, false, fault);
    return send(reply, stripeError(fault.status, { type: 'api_error', message: 'An unknown error occurred' }), requestId);
  }
  const params = paramsOf(request);
  const endpoint = `${request.method} ${request.url.split('?')[0]}`;
  const keyHeaders: Record<string, string> = idempotencyKey !== null ? { 'idempotency-key': idempotencyKey } : {};
  let answer: ApiAnswer;
  let answerRequestId = requestId;
  let replayed = false;
  const check = idempotencyKey !== null ? sim.keys.begin(idempotencyKey, endpoint, canonicalize(params) ?? '{}', requestId) : ({ kind: 'new' } as const);
  if (check.kind === 'refused') {
    log(check.answer.status, false, fault);
    return send(reply, check.answer, requestId, keyHeaders);
  }
  if (check.kind === 'replay') {
    if (fault?.kind === 'hold_before_commit') await sim.faults.hold(fault.holdMs);
    answer = check.answer;
    answerRequestId = check.requestId;
    replayed = true;
  } else {
    const invalid = mutation.validate();
    if (invalid) {
      if (idempotencyKey !== null) sim.keys.release(idempotencyKey);
      log(invalid.status, false, fault);
      return send(reply, invalid, requestId);
    }
    if (fault?.kind === 'hold_before_commit') await sim.faults.hold(fault.holdMs);
    const done = mutation.run();
    answer = done.answer;
    if (idempotencyKey !== null) sim.keys.save(idempotencyKey, answer);
    for (const event of done.events) sim.webhooks.emit(event, { id: requestId, idempotencyKey });
  }
  // From here the answer is saved (or was already): faults only lose it on the way back.
  const answerHeaders = replayed ? { ...keyHeaders, 'idempotent-replayed': 'true' } : keyHeaders;
  if (fault?.kind === 'drop_after_commit') {
    log('dropped', replayed, fault);
    dropConnection(reply);
    return reply;
  }
  if (fault?.kind === 'error_after_commit') {
    log(fault.status, replayed, fault);
    return send(reply, stripeError(fault.status, { type: 'api_error', message: 'An unknown error occurred' }), requestId, keyHeaders);
  }
  if (fault?.kind === 'hold_after_commit') await sim.faults.hold(fault.holdMs);
  log(answer.status, replayed, fault);
  return send(reply, answer, answerRequestId, answerHeaders);
}

/** One GET: authenticate, then the faults that make sense for a read. */
async function handleRead(ready: Ready, request: FastifyRequest, reply: FastifyReply, operation: Operation, read: () => ApiAnswer): Promise<FastifyReply> {
  const sim = ready();
  const requestId = stripeLikeId('req');
  const log = (status: number | 'dropped', fault: Fault | null): void => {
    sim.requests.push({ operation, method: request.method, path: request.url, idempotencyKey: null, status, replayed: false, fault: fault?.kind ?? null, atMs: sim.nowMs() });
  };
  const key = apiKeyOf(request);
  if (key === null || !sim.apiKeyAccepted(key)) {
    log(401, null);
    return send(reply, stripeError(401, { type: 'invalid_request_error', message: `Invalid API Key provided: ${key ?? '(none)'}` }), requestId);
  }
  const fault = sim.faults.take(operation);
  if (fault?.kind === 'rate_limit') {
    log(429, fault);
    return send(reply, stripeError(429, { type: 'invalid_request_error', code: 'rate_limit', message: 'Request rate limit exceeded.' }), requestId);
  }
  if (fault?.kind === 'error_before_commit' || fault?.kind === 'error_after_commit') {
    log(fault.status, fault);
    return send(reply, stripeError(fault.status, { type: 'api_error', message: 'An unknown error occurred' }), requestId);
  }
  if (fault?.kind === 'hold_before_commit' || fault?.kind === 'hold_after_commit') await sim.faults.hold(fault.holdMs);
  if (fault?.kind === 'drop_after_commit') {
    log('dropped', fault);
    dropConnection(reply);
    return reply;
  }
  const answer = read();
  log(answer.status, fault);
  return send(reply, answer, requestId);
}

function registerApiRoutes(app: FastifyInstance, ready: Ready): void {
  app.post('/v1/payment_intents', (request, reply) =>
    handleMutation(ready, request, reply, {
      operation: 'create_payment_intent',
      validate: () => validationError('create', paramsOf(request)),
      run: () => ready().payments.create(paramsOf(request)),
    }),
  );
  app.get<{ Params: { id: string } }>('/v1/payment_intents/:id', (request, reply) => {
    if (request.params.id === 'search') return searchPaymentIntents(ready, request, reply);
    return handleRead(ready, request, reply, 'retrieve_payment_intent', () => ready().payments.retrieve(request.params.id));
  });
  app.post<{ Params: { id: string } }>('/v1/payment_intents/:id/capture', (request, reply) =>
    handleMutation(ready, request, reply, {
      operation: 'capture_payment_intent',
      validate: () => validationError('capture', paramsOf(request)),
      run: () => ready().payments.capture(request.params.id, paramsOf(request)),
    }),
  );
  app.post<{ Params: { id: string } }>('/v1/payment_intents/:id/cancel', (request, reply) =>
    handleMutation(ready, request, reply, {
      operation: 'cancel_payment_intent',
      validate: () => validationError('cancel', paramsOf(request)),
      run: () => ready().payments.cancel(request.params.id, paramsOf(request)),
    }),
  );
  app.get('/v1/payment_intents', (request, reply) =>
    handleRead(ready, request, reply, 'list_payment_intents', () => listPaymentIntents(ready(), request.query as Params)),
  );
  app.post('/v1/refunds', (request, reply) =>
    handleMutation(ready, request, reply, {
      operation: 'create_refund',
      validate: () => validationError('refund', paramsOf(request)),
      run: () => ready().payments.refund(paramsOf(request)),
    }),
  );
  app.get('/v1/refunds', (request, reply) =>
    handleRead(ready, request, reply, 'list_refunds', () => listRefunds(ready(), request.query as Params)),
  );
  app.setNotFoundHandler((request, reply) =>
    send(reply, stripeError(404, { type: 'invalid_request_error', message: `Unrecognized request URL (${request.method}: ${request.url}).` }), stripeLikeId('req')),
  );
}

function invalidParam(message: string, param: string): ApiAnswer {
  return stripeError(400, { type: 'invalid_request_error', message, param });
}

function integerParam(value: unknown, param: string): number | ApiAnswer | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !/^[0-9]+$/.test(value)) return invalidParam(`Invalid integer: ${param}`, param);
  return Number(value);
}

function listPaymentIntents(sim: StripeSimulator, query: Params): ApiAnswer {
  const limit = integerParam(query['limit'], 'limit') ?? defaultListLimit;
  if (typeof limit !== 'number') return limit;
  if (limit < 1 || limit > maxListLimit) return invalidParam(`limit must be between 1 and ${maxListLimit}`, 'limit');
  const bounds: Partial<Record<'gt' | 'gte' | 'lt' | 'lte', number>> = {};
  const created = query['created'];
  if (created !== undefined) {
    if (typeof created === 'string') {
      const exact = integerParam(created, 'created');
      if (typeof exact !== 'number') return exact ?? invalidParam('Invalid created', 'created');
      bounds.gte = exact;
      bounds.lte = exact;
    } else if (typeof created === 'object' && created !== null) {
      for (const [op, value] of Object.entries(created)) {
        if (op !== 'gt' && op !== 'gte' && op !== 'lt' && op !== 'lte') return invalidParam(`Received unknown parameter: created[${op}]`, `created[${op}]`);
        const n = integerParam(value, `created[${op}]`);
        if (typeof n !== 'number') return n ?? invalidParam(`Invalid created[${op}]`, `created[${op}]`);
        bounds[op] = n;
      }
    }
  }
  const inWindow = (createdS: number): boolean =>
    (bounds.gt === undefined || createdS > bounds.gt) &&
    (bounds.gte === undefined || createdS >= bounds.gte) &&
    (bounds.lt === undefined || createdS < bounds.lt) &&
    (bounds.lte === undefined || createdS <= bounds.lte);
  const all = sim.payments.list((intent) => inWindow(Math.floor(intent.createdMs / 1000)));
  let start = 0;
  const startingAfter = query['starting_after'];
  if (typeof startingAfter === 'string') {
    const index = all.findIndex((intent) => intent.id === startingAfter);
    if (index === -1) return stripeError(404, { type: 'invalid_request_error', code: 'resource_missing', message: `No such payment_intent: '${startingAfter}'`, param: 'starting_after' });
    start = index + 1;
  }
  const page = all.slice(start, start + limit);
  return {
    status: 200,
    body: { object: 'list', data: page.map((intent) => sim.payments.render(intent)), has_more: start + limit < all.length, url: '/v1/payment_intents' },
  };
}

/** `payment_intent` (required here: the simulator lists one payment's refunds), `limit`, `starting_after`. */
function listRefunds(sim: StripeSimulator, query: Params): ApiAnswer {
  for (const name of Object.keys(query)) {
    if (name !== 'payment_intent' && name !== 'limit' && name !== 'starting_after') return invalidParam(`Received unknown parameter: ${name}`, name);
  }
  const limit = integerParam(query['limit'], 'limit') ?? defaultListLimit;
  if (typeof limit !== 'number') return limit;
  if (limit < 1 || limit > maxListLimit) return invalidParam(`limit must be between 1 and ${maxListLimit}`, 'limit');
  const paymentIntent = query['payment_intent'];
  if (typeof paymentIntent !== 'string') return invalidParam('The simulator lists the refunds of one payment: payment_intent is required.', 'payment_intent');
  if (!sim.payments.paymentIntents.has(paymentIntent)) {
    return stripeError(404, { type: 'invalid_request_error', code: 'resource_missing', message: `No such payment_intent: '${paymentIntent}'`, param: 'payment_intent' });
  }
  const all = sim.payments.refundsOf(paymentIntent);
  let start = 0;
  const startingAfter = query['starting_after'];
  if (typeof startingAfter === 'string') {
    const index = all.findIndex((refund) => refund.id === startingAfter);
    if (index === -1) return stripeError(404, { type: 'invalid_request_error', code: 'resource_missing', message: `No such refund: '${startingAfter}'`, param: 'starting_after' });
    start = index + 1;
  }
  const page = all.slice(start, start + limit);
  return {
    status: 200,
    body: { object: 'list', data: page.map((refund) => sim.payments.renderRefund(refund)), has_more: start + limit < all.length, url: '/v1/refunds' },
  };
}

/** `metadata['key']:'value'` and `status:'value'` clauses joined by AND: the subset of Stripe's query language used here. */
const searchClause = /^(?:metadata\['([^']+)'\]|(status)):'([^']*)'$/;

function searchPaymentIntents(ready: Ready, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  return handleRead(ready, request, reply, 'search_payment_intents', () => {
    const sim = ready();
    const query = (request.query as Params)['query'];
    if (typeof query !== 'string' || query.trim() === '') return invalidParam('Missing required param: query.', 'query');
    const clauses: { metadataKey: string | null; value: string }[] = [];
    for (const part of query.split(/\s+AND\s+/)) {
      const match = searchClause.exec(part.trim());
      if (!match) return invalidParam(`The simulator's search understands metadata['k']:'v' and status:'v' joined by AND, not: ${part}`, 'query');
      clauses.push({ metadataKey: match[1] ?? null, value: match[3]! });
    }
    const hits = sim.payments.list(
      (intent) =>
        sim.searchVisible(intent.createdMs) &&
        clauses.every((c) => (c.metadataKey === null ? intent.status === c.value : intent.metadata[c.metadataKey] === c.value)),
    );
    return {
      status: 200,
      body: { object: 'search_result', data: hits.slice(0, maxListLimit).map((intent) => sim.payments.render(intent)), has_more: hits.length > maxListLimit, next_page: null, url: '/v1/payment_intents/search' },
    };
  });
}

const advanceClockSchema = z.object({ ms: z.number().int().positive() });
const releaseWebhooksSchema = z.object({ order: z.enum(['created', 'reversed']).default('created') });
const authenticateSchema = z.object({ outcome: z.enum(['succeed', 'fail']) });

/** A 400 naming the field, for the control routes. */
function badControlInput(reply: FastifyReply, error: z.ZodError): FastifyReply {
  const issue = error.issues[0];
  return reply.code(400).send({ error: { field: issue?.path.join('.') ?? '', message: issue?.message ?? 'invalid input' } });
}

function registerControlRoutes(app: FastifyInstance, ready: Ready): void {
  app.post('/_simulator/faults', (request, reply) => {
    const parsed = faultRuleSchema.safeParse(request.body);
    if (!parsed.success) return badControlInput(reply, parsed.error);
    ready().addFault(parsed.data);
    return reply.code(201).send({ pending: ready().faults.pending });
  });
  app.delete('/_simulator/faults', (_request, reply) => {
    ready().faults.clear();
    return reply.code(204).send();
  });
  app.post('/_simulator/holds/release', (_request, reply) => reply.send({ released: ready().releaseHolds() }));
  app.post('/_simulator/clock/advance', (request, reply) => {
    const parsed = advanceClockSchema.safeParse(request.body);
    if (!parsed.success) return badControlInput(reply, parsed.error);
    ready().advanceClock(parsed.data.ms);
    return reply.send({ nowMs: ready().nowMs() });
  });
  app.put('/_simulator/webhooks', (request, reply) => {
    const parsed = webhookConfigSchema.safeParse(request.body);
    if (!parsed.success) return badControlInput(reply, parsed.error);
    ready().configureWebhooks(parsed.data);
    return reply.code(204).send();
  });
  app.post('/_simulator/webhooks/release', (request, reply) => {
    const parsed = releaseWebhooksSchema.safeParse(request.body ?? {});
    if (!parsed.success) return badControlInput(reply, parsed.error);
    return reply.send({ released: ready().webhooks.release(parsed.data.order) });
  });
  app.post<{ Params: { id: string } }>('/_simulator/payment_intents/:id/authenticate', (request, reply) => {
    const parsed = authenticateSchema.safeParse(request.body);
    if (!parsed.success) return badControlInput(reply, parsed.error);
    const sim = ready();
    const { answer, events } = sim.payments.authenticate(request.params.id, parsed.data.outcome === 'succeed');
    for (const event of events) sim.webhooks.emit(event, { id: stripeLikeId('req'), idempotencyKey: null });
    return reply.code(answer.status).send(answer.body);
  });
  app.get('/_simulator/state', (_request, reply) => {
    const sim = ready();
    return reply.send({
      nowMs: sim.nowMs(),
      paymentIntents: [...sim.payments.paymentIntents.values()].map((intent) => sim.payments.render(intent)),
      refunds: [...sim.payments.refunds.values()].map((refund) => sim.payments.renderRefund(refund)),
      idempotencyKeys: sim.keys.size,
      events: sim.webhooks.events.map((event) => ({ id: event.id, type: event.type })),
      deliveries: sim.webhooks.deliveries,
      pendingFaults: sim.faults.pending,
      heldRequests: sim.faults.held,
    });
  });
}

export type { FaultRuleInput, WebhookConfigInput };
