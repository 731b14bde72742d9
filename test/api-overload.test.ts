import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { buildApi } from '../src/api/app.js';
import { createApiKey, principalForApiKey } from '../src/auth/api-keys.js';
import { loadConfig } from '../src/config.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { readCharge } from '../src/ledger/charges.js';
import { appContextOn } from '../src/runtime/app-context.js';
import { Client, type Connection } from '@temporalio/client';
import { ChargeService } from '../src/service/charge-service.js';
import { OverloadedError, UnavailableError } from '../src/domain/errors.js';
import { apiKeyFor, generousRateLimits, listenOnLoopback, send, type TestResponse } from './support/api.js';
import {
  balanceOf,
  captureCount,
  chargeBody,
  expectLedgerInvariants,
  fundedTenant,
  newKey,
  startTestWorker,
  testDataConverter,
  testPayloadSettings,
  testPolicy,
  useHarness,
  waitFor,
  workflowExists,
} from './support/harness.js';

const h = useHarness();

/**
 * An API whose charges go to a task queue of the test's own, so the test decides when a worker
 * serves it (none at first: the charges admitted stay undecided, as under a saturated worker),
 * with admission bounded to `maxChargesInFlight`.
 */
async function apiOnOwnQueue(maxChargesInFlight: number, temporal: Client = h.temporal) {
  const taskQueue = `overload-${randomBytes(4).toString('hex')}`;
  const config = loadConfig({ ...generousRateLimits, ...testPayloadSettings() });
  const charges = new ChargeService({
    temporal,
    ledger: h.pool,
    policy: testPolicy,
    amountMinorMax: config.CHARGE_AMOUNT_MINOR_MAX,
    waitBudgetMs: 30_000,
    taskQueue,
    admission: { maxChargesInFlight, retryAfterSeconds: 2, releaseWatchMaxMs: 120_000 },
  });
  const context = appContextOn({
    config,
    endpoints: { temporalAddress: h.connection.options.address!, databaseUrl: '' },
    temporal: h.temporal,
    ledger: h.pool,
    charges,
    close: async () => {},
  });
  const app = await buildApi({ context });
  const baseUrl = await listenOnLoopback(app);
  return {
    taskQueue,
    charges,
    baseUrl,
    close: async () => {
      charges.close();
      await app.close();
    },
  };
}

describe('admission: new charges beyond the bound are refused at once, nothing recorded or started', () => {
  it(
    'N+k concurrent creates with no worker serving: N admitted (202 pending, built without a worker) and all decided once one serves; k refused with 503 overloaded and Retry-After at once; replays still answered; a refused key later succeeds',
    { timeout: 120_000 },
    async () => {
      const admitted = 3;
      const extra = 4;
      const tenant = await fundedTenant(h, { label: 'overload', payerMinor: 100_000 });
      const api = await apiOnOwnQueue(admitted);
      const apiKey = await apiKeyFor(h.pool, tenant);
      const bodies = new Map<string, Record<string, unknown>>();
      const create = async (key: string): Promise<TestResponse & { ms: number }> => {
        if (!bodies.has(key)) bodies.set(key, chargeBody({ amount: 100 }));
        const startedAt = performance.now();
        const response = await send(api.baseUrl, '/v1/charges', {
          method: 'POST',
          apiKey,
          body: bodies.get(key),
          headers: { 'idempotency-key': key, prefer: 'wait=5' },
        });
        return { ...response, ms: performance.now() - startedAt };
      };
      let worker: Awaited<ReturnType<typeof startTestWorker>> | null = null;
      try {
        const keys = Array.from({ length: admitted + extra }, (_, i) => newKey(`ov${i}`));
        const answers = await Promise.all(keys.map(create));
        const accepted = keys.filter((_, i) => answers[i]!.status === 202);
        const refused = keys.filter((_, i) => answers[i]!.status === 503);
        expect(answers.map((a) => a.status).sort(), JSON.stringify(answers.map((a) => a.body))).toEqual(
          [...Array(admitted).fill(202), ...Array(extra).fill(503)],
        );
        for (const key of accepted) {
          const answer = answers[keys.indexOf(key)]!;
          // Built from the request (the ledger has no row yet): no worker was asked.
          expect(answer.body).toMatchObject({ status: 'pending', idempotency_key: key });
          expect(answer.headers.get('location')).toBe(`/v1/charges/${encodeURIComponent(key)}`);
        }
        for (const key of refused) {
          const answer = answers[keys.indexOf(key)]!;
          expect(answer.body).toMatchObject({ type: 'overloaded', status: 503 });
          expect(answer.headers.get('retry-after')).toBe('2');
          // At once: before any admitted charge's wait (5 s) ran out, so without waiting for anything.
          expect(answer.ms).toBeLessThan(Math.min(...accepted.map((k) => answers[keys.indexOf(k)]!.ms)));
          expect(await readCharge(h.pool, tenant, key), `${key}: no ledger row`).toBeNull();
          expect(await workflowExists(h, chargeWorkflowId(tenant, key)), `${key}: no workflow`).toBe(false);
        }
        expect(api.charges.admission!.chargesInFlight).toBe(admitted);

        // Saturated: a replay of an admitted key is answered (it starts nothing), a new key is not.
        const replay = await create(accepted[0]!);
        expect(replay.status).toBe(202);
        expect(replay.headers.get('idempotent-replayed')).toBe('true');
        const another = await create(newKey('ov-new'));
        expect(another.status).toBe(503);
        expect(another.body).toMatchObject({ type: 'overloaded' });
        // Reads are admitted too.
        const read = await send(api.baseUrl, `/v1/charges/${encodeURIComponent(accepted[1]!)}`, { apiKey });
        expect(read.status).toBe(503); // no worker to say how an open charge stands, but not refused as overloaded
        expect(read.body.type).toBe('service_unavailable');

        // A worker serves the queue: every admitted charge is decided, and their slots come back.
        worker = await startTestWorker({ taskQueue: api.taskQueue, pool: h.pool });
        for (const key of accepted) {
          await waitFor(async () => (await readCharge(h.pool, tenant, key))?.charge.status === 'succeeded', {
            timeoutMs: 60_000,
            what: `${key} decided`,
          });
        }
        await waitFor(async () => api.charges.admission!.chargesInFlight === 0, { timeoutMs: 30_000, what: 'the slots released' });

        // A refused key, retried, is a new charge like any other.
        const retried = await create(refused[0]!);
        expect(retried.status).toBe(201);
        expect(retried.body).toMatchObject({ status: 'succeeded' });
        for (const key of [...accepted, refused[0]!]) expect(await captureCount(h.pool, tenant, key)).toBe(1);
        for (const key of refused.slice(1)) expect(await readCharge(h.pool, tenant, key)).toBeNull();
        expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(100_000 - 100 * (admitted + 1));
        await expectLedgerInvariants(h.pool, tenant);
      } finally {
        await worker?.stop();
        await api.close();
      }
    },
  );
});

/**
 * A connection whose StartWorkflowExecution answers are lost: the call reaches Temporal (or, with
 * `reaches: false`, does not) and the caller hears DEADLINE_EXCEEDED either way, as when the start
 * deadline runs out on a loaded server.
 */
function lossyStarts(connection: Connection, reaches: boolean): { connection: Connection; starts: () => number } {
  let starts = 0;
  const lost = (): Error =>
    Object.assign(new Error('4 DEADLINE_EXCEEDED: Deadline exceeded (the answer was lost)'), { code: 4, details: 'Deadline exceeded', metadata: { get: () => [], getMap: () => ({}) } });
  const proxied = withWorkflowServiceCall(connection, 'startWorkflowExecution', (call) => async (request) => {
    starts += 1;
    if (reaches) await call(request);
    throw lost();
  });
  return { connection: proxied, starts: () => starts };
}

/** `connection` with one WorkflowService method replaced by what `wrap` makes of the real one; every other call untouched. */
function withWorkflowServiceCall(
  connection: Connection,
  method: string,
  wrap: (call: (request: unknown) => Promise<unknown>) => (request: unknown) => Promise<unknown>,
): Connection {
  const workflowService = new Proxy(connection.workflowService, {
    get(service, name) {
      const member: unknown = Reflect.get(service, name, service);
      if (typeof member !== 'function') return member;
      const bound = (member as (...args: unknown[]) => unknown).bind(service);
      return name === method ? wrap(bound as (request: unknown) => Promise<unknown>) : bound;
    },
  });
  return new Proxy(connection, {
    get(target, name) {
      if (name === 'workflowService') return workflowService;
      const member: unknown = Reflect.get(target, name, target);
      return typeof member === 'function' ? (member as (...args: unknown[]) => unknown).bind(target) : member;
    },
  });
}

describe('a start whose answer was lost', () => {
  const serviceOn = (connection: Connection) =>
    new ChargeService({
      temporal: new Client({ connection, namespace: 'default', dataConverter: testDataConverter() }),
      ledger: h.pool,
      policy: testPolicy,
      amountMinorMax: 1_000_000_000_000,
      waitBudgetMs: 60_000,
      admission: { maxChargesInFlight: 8, retryAfterSeconds: 1, releaseWatchMaxMs: 60_000 },
    });

  it('that reached Temporal is found by describing it and answered as the charge (not 503): once, decided', { timeout: 60_000 }, async () => {
    const tenant = await fundedTenant(h, { label: 'loststart', payerMinor: 10_000 });
    const lossy = lossyStarts(h.connection, true);
    const charges = serviceOn(lossy.connection);
    try {
      const key = newKey('lost');
      const reply = await charges.charge(tenant, key, chargeBody({ amount: 250 }));
      expect(lossy.starts()).toBe(1);
      expect(reply).toMatchObject({ replayed: false, completed: true, charge: { status: 'succeeded', amountMinor: 250 } });
      expect(await captureCount(h.pool, tenant, key)).toBe(1);
      await waitFor(async () => charges.admission!.chargesInFlight === 0, { what: 'its place given back' });
    } finally {
      charges.close();
    }
  });

  it('that never reached Temporal is a 503 (service_unavailable) and nothing was started', { timeout: 60_000 }, async () => {
    const tenant = await fundedTenant(h, { label: 'nostart', payerMinor: 10_000 });
    const lossy = lossyStarts(h.connection, false);
    const charges = serviceOn(lossy.connection);
    try {
      const key = newKey('nostart');
      await expect(charges.charge(tenant, key, chargeBody({ amount: 250 }))).rejects.toBeInstanceOf(UnavailableError);
      expect(lossy.starts()).toBe(1);
      expect(await workflowExists(h, chargeWorkflowId(tenant, key))).toBe(false);
      expect(await readCharge(h.pool, tenant, key)).toBeNull();
      expect(charges.admission!.chargesInFlight).toBe(0);
    } finally {
      charges.close();
    }
  });
});

/** A connection whose DescribeWorkflowExecution calls wait until `release()` is called, as on a busy server. */
function heldDescribes(connection: Connection): { connection: Connection; asked: () => number; answered: () => number; release: () => void } {
  let asked = 0;
  let answered = 0;
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const proxied = withWorkflowServiceCall(connection, 'describeWorkflowExecution', (call) => async (request) => {
    asked += 1;
    await gate;
    try {
      return await call(request);
    } finally {
      answered += 1;
    }
  });
  return { connection: proxied, asked: () => asked, answered: () => answered, release };
}

describe('a full process refuses without waiting for a busy Temporal', () => {
  const describeBudgetMs = 50;
  it(`a key with no ledger row whose describe does not answer within ${describeBudgetMs} ms is refused as new (503 overloaded), nothing started; retried once there is room, it attaches: one charge`, { timeout: 90_000 }, async () => {
    const tenant = await fundedTenant(h, { label: 'busydescribe', payerMinor: 10_000 });
    const taskQueue = `overload-${randomBytes(4).toString('hex')}`;
    const serviceOn = (connection: Connection) =>
      new ChargeService({
        temporal: new Client({ connection, namespace: 'default', dataConverter: testDataConverter() }),
        ledger: h.pool,
        policy: testPolicy,
        amountMinorMax: 1_000_000_000_000,
        waitBudgetMs: 60_000,
        taskQueue,
        admission: { maxChargesInFlight: 1, retryAfterSeconds: 1, releaseWatchMaxMs: 60_000, describeBudgetMs },
      });
    // Another process started `elsewhere` (no worker serves the queue yet: no ledger row).
    const other = serviceOn(h.connection);
    const held = heldDescribes(h.connection);
    const full = serviceOn(held.connection);
    const elsewhere = newKey('elsewhere');
    const mine = newKey('mine');
    const body = chargeBody({ amount: 300 });
    let worker: Awaited<ReturnType<typeof startTestWorker>> | null = null;
    try {
      await other.startCharge(tenant, elsewhere, body);
      await full.startCharge(tenant, mine, chargeBody({ amount: 200 }));
      expect(full.admission!.chargesInFlight).toBe(1);

      await expect(full.charge(tenant, elsewhere, body)).rejects.toBeInstanceOf(OverloadedError);
      // Refused while the describe was still held: the answer did not wait for it.
      expect(held.asked()).toBeGreaterThanOrEqual(1);
      expect(held.answered()).toBe(0);
      expect(await readCharge(h.pool, tenant, elsewhere)).toBeNull();
      held.release();

      worker = await startTestWorker({ taskQueue, pool: h.pool });
      await waitFor(async () => full.admission!.chargesInFlight === 0, { timeoutMs: 60_000, what: 'the place given back' });
      const retried = await full.charge(tenant, elsewhere, body);
      expect(retried).toMatchObject({ replayed: true, completed: true, charge: { status: 'succeeded', amountMinor: 300 } });
      for (const key of [elsewhere, mine]) expect(await captureCount(h.pool, tenant, key)).toBe(1);
      expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 500);
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      held.release();
      await worker?.stop();
      other.close();
      full.close();
    }
  });
});

/** A connection that counts its DescribeWorkflowExecution calls; every call goes through untouched. */
function countedDescribes(connection: Connection): { connection: Connection; asked: () => number } {
  let asked = 0;
  const proxied = withWorkflowServiceCall(connection, 'describeWorkflowExecution', (call) => async (request) => {
    asked += 1;
    return call(request);
  });
  return { connection: proxied, asked: () => asked };
}

describe('a full process decides from the ledger alone (by default)', () => {
  it('over HTTP, every place taken: a decided key is replayed (the rate-limit statement read its row), a key another process started whose Try has not run is refused 503 overloaded without asking Temporal, nothing started; sent again once there is room, it attaches: one charge each', { timeout: 120_000 }, async () => {
    const tenant = await fundedTenant(h, { label: 'ledgeralone', payerMinor: 10_000 });
    const counted = countedDescribes(h.connection);
    const api = await apiOnOwnQueue(1, new Client({ connection: counted.connection, namespace: 'default', dataConverter: testDataConverter() }));
    const other = new ChargeService({
      temporal: h.temporal,
      ledger: h.pool,
      policy: testPolicy,
      amountMinorMax: 1_000_000_000_000,
      waitBudgetMs: 60_000,
      taskQueue: api.taskQueue,
    });
    const apiKey = await apiKeyFor(h.pool, tenant);
    const bodies = new Map<string, Record<string, unknown>>();
    const create = (key: string, amount: number, wait = 5) => {
      if (!bodies.has(key)) bodies.set(key, chargeBody({ amount }));
      return send(api.baseUrl, '/v1/charges', { method: 'POST', apiKey, body: bodies.get(key), headers: { 'idempotency-key': key, prefer: `wait=${wait}` } });
    };
    const decided = newKey('decided');
    const elsewhere = newKey('elsewhere');
    const mine = newKey('mine');
    let worker: Awaited<ReturnType<typeof startTestWorker>> | null = await startTestWorker({ taskQueue: api.taskQueue, pool: h.pool });
    try {
      expect((await create(decided, 100, 30)).status).toBe(201);
      await waitFor(async () => api.charges.admission!.chargesInFlight === 0, { timeoutMs: 30_000, what: 'the place given back' });
      await worker.stop();
      worker = null;
      // No worker now: what starts stays undecided, without a ledger row.
      // The same body as the requests below send: a retry of that charge, not another under its key.
      bodies.set(elsewhere, chargeBody({ amount: 300 }));
      // Made with the same key as the API's requests: in a tenant with keys the ledger refuses a charge without one.
      const key = (await principalForApiKey(h.pool, apiKey))!;
      await other.startCharge(tenant, elsewhere, bodies.get(elsewhere), { actor: { keyId: key.keyId, mandate: key.mandate } });
      expect((await create(mine, 200, 1)).status).toBe(202);
      expect(api.charges.admission!.chargesInFlight).toBe(1);
      const describesBefore = counted.asked();

      const replay = await create(decided, 100);
      expect(replay.status).toBe(200);
      expect(replay.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.body).toMatchObject({ status: 'succeeded', idempotency_key: decided });

      const refused = await create(elsewhere, 300);
      expect(refused.status).toBe(503);
      expect(refused.body).toMatchObject({ type: 'overloaded' });
      expect(refused.headers.get('server-timing')).toMatch(/admission;dur=/);
      expect(counted.asked() - describesBefore).toBe(0);
      expect(await readCharge(h.pool, tenant, elsewhere)).toBeNull();

      worker = await startTestWorker({ taskQueue: api.taskQueue, pool: h.pool });
      await waitFor(async () => api.charges.admission!.chargesInFlight === 0, { timeoutMs: 60_000, what: 'the place given back' });
      const retried = await create(elsewhere, 300, 30);
      expect(retried.status).toBe(200);
      expect(retried.headers.get('idempotent-replayed')).toBe('true');
      expect(retried.body).toMatchObject({ status: 'succeeded', amount: 300 });
      for (const key of [decided, elsewhere, mine]) expect(await captureCount(h.pool, tenant, key)).toBe(1);
      expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 600);
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      await worker?.stop();
      other.close();
      await api.close();
    }
  });
});

describe('a full process refuses a new key before taking its rate-limit token, and records nothing', () => {
  /** Fills the process's one place with a charge no worker serves yet (202 pending); its key. */
  async function fillTheOnePlace(baseUrl: string, apiKey: string): Promise<string> {
    const key = newKey('ov-fill');
    const filled = await send(baseUrl, '/v1/charges', {
      method: 'POST',
      apiKey,
      body: chargeBody({ amount: 100 }),
      headers: { 'idempotency-key': key, prefer: 'wait=1' },
    });
    expect(filled.status, JSON.stringify(filled.body)).toBe(202);
    return key;
  }

  async function tokenConsumedAt(token: string): Promise<Date | null> {
    const hash = createHash('sha256').update(token, 'utf8').digest('hex');
    const result = await h.pool.query<{ consumed_at: Date | null }>('SELECT consumed_at FROM idempotency_tokens WHERE token_hash = $1', [hash]);
    expect(result.rows).toHaveLength(1);
    return result.rows[0]!.consumed_at;
  }

  it('an Idempotency-Token create refused 503 overloaded leaves its token unused (over HTTP and in the service); once there is room the same token makes one charge, whose key it is', { timeout: 120_000 }, async () => {
    const tenant = await fundedTenant(h, { label: 'overload-token', payerMinor: 100_000 });
    const api = await apiOnOwnQueue(1);
    const apiKey = await apiKeyFor(h.pool, tenant);
    let worker: Awaited<ReturnType<typeof startTestWorker>> | null = null;
    try {
      const issued = await send(api.baseUrl, '/v1/idempotency-tokens', { method: 'POST', apiKey, body: {} });
      expect(issued.status).toBe(201);
      const token = String(issued.body.token);
      const filler = await fillTheOnePlace(api.baseUrl, apiKey);
      const body = chargeBody({ amount: 100 });
      const create = () => send(api.baseUrl, '/v1/charges', { method: 'POST', apiKey, body, headers: { 'idempotency-token': token, prefer: 'wait=5' } });

      const refused = await create();
      expect(refused.status, JSON.stringify(refused.body)).toBe(503);
      expect(refused.body).toMatchObject({ type: 'overloaded' });
      expect(await tokenConsumedAt(token)).toBeNull();
      expect(await readCharge(h.pool, tenant, token)).toBeNull();
      expect(await workflowExists(h, chargeWorkflowId(tenant, token))).toBe(false);

      // The service's own check (a surface that did not ask first): refused before the redemption runs.
      let redeemed = false;
      await expect(
        api.charges.charge(tenant, token, body, {
          admission: {
            ledgerKnowsKey: false,
            beforeStart: async () => {
              redeemed = true;
            },
          },
        }),
      ).rejects.toBeInstanceOf(OverloadedError);
      expect(redeemed).toBe(false);
      expect(await tokenConsumedAt(token)).toBeNull();

      worker = await startTestWorker({ taskQueue: api.taskQueue, pool: h.pool });
      await waitFor(async () => (await readCharge(h.pool, tenant, filler))?.charge.status === 'succeeded', { timeoutMs: 60_000, what: 'the filler decided' });
      await waitFor(async () => api.charges.admission!.chargesInFlight === 0, { timeoutMs: 30_000, what: 'its place given back' });

      const created = await create();
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.body).toMatchObject({ status: 'succeeded', idempotency_key: token });
      expect(await tokenConsumedAt(token)).not.toBeNull();
      const replayed = await create();
      expect(replayed.status).toBe(200);
      expect(replayed.headers.get('idempotent-replayed')).toBe('true');
      expect(await captureCount(h.pool, tenant, token)).toBe(1);
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      await worker?.stop();
      await api.close();
    }
  });

  it('its refusals still spend the key\'s tokens (taken after the answer): a caller that keeps sending to a full process is refused 429 once its bucket is empty, and nothing is recorded', { timeout: 120_000 }, async () => {
    const tenant = await fundedTenant(h, { label: 'overload-hammer', payerMinor: 100_000 });
    const api = await apiOnOwnQueue(1);
    const filler = await apiKeyFor(h.pool, tenant);
    const burst = 3;
    const hammer = (await createApiKey(h.pool, tenant, 'hammer', 'agent', undefined, {}, { ratePerSecond: 1, burst, maxOpenHolds: null })).key;
    try {
      await fillTheOnePlace(api.baseUrl, filler);
      const keys: string[] = [];
      const statuses: number[] = [];
      // The bucket refills 1 token a second: each refusal is answered in far less, so the bucket empties.
      for (let i = 0; i < 30 && !statuses.includes(429); i += 1) {
        const key = newKey('ov-hammer');
        keys.push(key);
        const answer = await send(api.baseUrl, '/v1/charges', {
          method: 'POST',
          apiKey: hammer,
          body: chargeBody({ amount: 100 }),
          headers: { 'idempotency-key': key },
        });
        statuses.push(answer.status);
        if (answer.status === 429) expect(answer.body).toMatchObject({ type: 'rate_limited', scope: 'key' });
        else expect(answer.body, JSON.stringify(answer.body)).toMatchObject({ type: 'overloaded' });
      }
      expect(statuses.slice(0, burst)).toEqual(Array(burst).fill(503));
      expect(statuses).toContain(429);
      for (const key of keys) expect(await readCharge(h.pool, tenant, key), key).toBeNull();
    } finally {
      await api.close();
    }
  });
});
