/**
 * One side of tree-ab.ts: a long-lived process that runs ONE checkout's own code (its ChargeService,
 * workers, workflow bundle, activities, bench helpers) on the servers tree-ab.ts started, and makes
 * closed-loop blocks of real charges when asked. tree-ab.ts copies this file into the other
 * checkout's bench/experiments/ and runs it there with `npx tsx`, so every relative import below
 * resolves to that checkout's modules. It therefore imports only what the checkouts it supports
 * share; what moved between them (the payload key file, the Stripe simulator) is found by trying
 * each place, and what only this tree has (webhook endpoints, the loopback receiver) is imported
 * only by the scenario that needs it.
 *
 * Protocol: tree-ab.ts starts it with `node --import tsx` and an IPC channel; it sends one
 * DriverRequest at a time and this answers each with one DriverAnswer. Logs go to stderr.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { join } from 'node:path';
import { bundleChargeWorkflows } from '../../src/worker/charge-worker.js';
import { migrateLedger } from '../../src/ledger/migrate.js';
import { createLedgerPool, type LedgerPool } from '../../src/ledger/pool.js';
import { bodyChargeOperation, chargeBody, ChargeTally, providerChargeBody, settleUnsettled } from '../lib/charging.js';
import { runClosedLoop, type Operation } from '../lib/load.js';
import { openPopulation, spreadPicker, type Population } from '../lib/population.js';
import { openTemporalSession, type TemporalSession } from '../lib/session.js';
import type { BenchStack } from '../lib/bench-stack.js';
import { verifyScenario, type Verification } from '../lib/verify.js';
import { defaultTuning } from '../run.js';
import { spreadPopulationSize } from '../scenarios/p1-throughput.js';
import { defaultProviderLatencyMs } from '../scenarios/p1-provider.js';

export type DriverScenario = 'p1' | 'p1-provider' | 'p1-webhook';

export type DriverRequest =
  | { type: 'open'; scenario: DriverScenario; tenant: string; queuePrefix: string }
  | { type: 'block'; key: string; concurrency: number; durationMs: number }
  | { type: 'verify' }
  | { type: 'close' };

export type DriverAnswer =
  | { ok: true; block?: BlockAnswer; verification?: Verification; receiverPid?: number }
  | { ok: false; error: string };

/** One block: charges decided (succeeded), failures, and its times. */
export interface BlockAnswer {
  completed: number;
  failed: number;
  /** The closed loop's time, its drain of in-flight calls included: what the block's rate divides by. */
  chargesMs: number;
  /** The block's whole time: chargesMs and, for p1-webhook, the wait for its events to arrive. */
  elapsedMs: number;
  /** p1-webhook: of the elapsed time, how long the block's events took to arrive after its last charge. */
  deliveryDrainMs: number | null;
  /** p1-webhook: the block's charge events, and how many reached the receiver. */
  events: number | null;
  delivered: number | null;
  failureSamples: string[];
}

/** How long a p1-webhook block's events may take to arrive after its last charge, milliseconds. */
const deliveryDrainBudgetMs = 60_000;
/** Hard cap on charges one block may start (a block is seconds long; this is far above it). */
const blockMaxOperations = 100_000;

const env = (name: string): string => {
  const value = process.env[name];
  if (value === undefined || value === '') throw new Error(`${name} is not set (tree-ab.ts sets it)`);
  return value;
};

Runtime.install({ logger: new DefaultLogger('WARN') });
const log = (line: string): void => void process.stderr.write(`${line}\n`);
const dataDir = env('TREE_AB_DATA_DIR');
const databaseUrl = env('TREE_AB_DATABASE_URL');
const temporalAddress = env('TREE_AB_TEMPORAL_ADDRESS');

/** The first of `paths` (relative to this file) that imports: where a module of the checkout lives differs between checkouts. */
async function importFirst<T>(paths: readonly string[]): Promise<T> {
  const errors: string[] = [];
  for (const path of paths) {
    try {
      return (await import(path)) as T;
    } catch (error) {
      errors.push(`${path}: ${(error as Error).message}`);
    }
  }
  throw new Error(`none of these modules loads:\n${errors.join('\n')}`);
}

interface Side {
  scenario: DriverScenario;
  ledger: LedgerPool;
  session: TemporalSession;
  population: Population;
  tally: ChargeTally;
  /** The charge of the n-th call of a block whose keys start with `keyPrefix`. */
  operation(keyPrefix: string): Operation;
  /** p1-webhook: waits until every charge event since `since` reached the receiver. */
  drain: ((since: Date) => Promise<{ events: number; delivered: number }>) | null;
  /** p1-webhook: the receiver's process, whose CPU tree-ab counts apart (a receiver is the caller's, elsewhere). */
  receiverPid: number | null;
  close(): Promise<void>;
}

async function open(request: Extract<DriverRequest, { type: 'open' }>): Promise<Side> {
  await mkdir(dataDir, { recursive: true });
  // Encrypted payloads, as every deployment runs them: this side's own key file, written by this checkout's code.
  const keyFile = await importFirst<typeof import('../../src/codec/payload-key-file.js')>(['../../src/codec/payload-key-file.js', '../../src/stack/payload-key-file.js']);
  process.env.CHARGEGUARD_PAYLOAD_KEYS_FILE = (await keyFile.ensurePayloadKeyFile(dataDir)).path;
  await migrateLedger(databaseUrl);
  const ledger = createLedgerPool({ databaseUrl, maxConnections: 8 });
  const chargeBundlePath = join(dataDir, 'charge.js');
  await writeFile(chargeBundlePath, (await bundleChargeWorkflows()).code);
  const closers: (() => Promise<void>)[] = [() => ledger.end()];
  const closeAll = async (): Promise<void> => {
    for (const close of closers.reverse()) await close();
  };
  try {
    let stripeEndpoint: Parameters<typeof openTemporalSession>[1]['stripeEndpoint'];
    if (request.scenario === 'p1-provider') {
      type Simulator = typeof import('../../src/providers/stripe/simulator/server.js');
      const { StripeSimulator } = await importFirst<Simulator>(['../../src/providers/stripe/simulator/server.js', '../../src/providers/simulator/server.js']);
      const simulator = await StripeSimulator.start({ port: 0, responseDelayMs: defaultProviderLatencyMs });
      closers.push(() => simulator.stop());
      stripeEndpoint = simulator.endpoint;
    }
    // Only the servers' addresses are read from the stack by openTemporalSession.
    const stack = { temporalAddress, databaseUrl } as BenchStack;
    const session = await openTemporalSession(stack, {
      placement: 'in-process',
      tuning: defaultTuning,
      eagerStart: true,
      chargeTaskQueue: `${request.queuePrefix}-charges`,
      baselineTaskQueue: null,
      bundles: { chargeBundlePath, baselineBundlePath: '' },
      ...(stripeEndpoint === undefined ? {} : { stripeEndpoint }),
      // The deliverer runs beside the workers as `npm run bench` runs it (P1 carries its polling with
      // no endpoint); checkouts from before the outbox have no deliverer and ignore this.
      webhookDelivery: true,
    });
    closers.push(() => session.close());
    const population = await openPopulation(ledger, {
      tenant: request.tenant,
      // A provider charge's card pays: no payer accounts.
      ...(request.scenario === 'p1-provider' ? { payers: 0, payees: spreadPopulationSize.payees } : spreadPopulationSize),
    });
    const tally = new ChargeTally();
    let blocks = 0;
    const operation = (keyPrefix: string): Operation => {
      // Each block starts further along the accounts, so consecutive blocks do not begin on the same payers.
      const offset = 7 * ++blocks;
      const payer = spreadPicker(population.payers, offset);
      const payee = spreadPicker(population.payees, offset);
      return bodyChargeOperation(session.charges, {
        tenant: population.tenant,
        keyPrefix,
        body: request.scenario === 'p1-provider'
          ? (key, n) => providerChargeBody(key, payee(n))
          : (key, n) => chargeBody(key, payer(n), payee(n)),
        tally,
      });
    };
    const webhook = request.scenario === 'p1-webhook' ? await openWebhookDrain(ledger, population.tenant, closers) : null;
    return { scenario: request.scenario, ledger, session, population, tally, operation, drain: webhook?.drain ?? null, receiverPid: webhook?.receiverPid ?? null, close: closeAll };
  } catch (error) {
    await closeAll();
    throw error;
  }
}

/**
 * P1-webhook's endpoint (every charge event, a loopback receiver in its own process, as
 * bench/scenarios/p1-webhook.ts sets it up) and the wait for a block's events to arrive.
 */
async function openWebhookDrain(
  ledger: LedgerPool,
  tenant: string,
  closers: (() => Promise<void>)[],
): Promise<{ drain: (since: Date) => Promise<{ events: number; delivered: number }>; receiverPid: number }> {
  const { eventTypesOf } = await import('../../src/domain/events.js');
  const { webhookEndpointLimits } = await import('../../src/domain/webhook-endpoints.js');
  const { createEndpoint } = await import('../../src/ledger/webhook-endpoints.js');
  const { LoopbackReceiver } = await import('../lib/webhook-receiver.js');
  const receiver = await LoopbackReceiver.start();
  closers.push(() => receiver.stop());
  await createEndpoint(
    ledger,
    { tenant, url: receiver.url, enabledEvents: eventTypesOf('charge'), description: 'tree-ab receiver on loopback' },
    webhookEndpointLimits.endpointsPerTenantMax,
  );
  // Every charge event of the tenant before a block reached the receiver in the drain of the block
  // before it; so a block's events are in when the receiver has had that many more distinct ids. The
  // wait asks the receiver for a count only: it is inside the block's CPU window, and a listing of every
  // id each poll would load the machine it measures.
  let uniqueBefore = 0;
  const drain = async (since: Date): Promise<{ events: number; delivered: number }> => {
    const deadline = Date.now() + deliveryDrainBudgetMs;
    const { rows } = await ledger.query<{ n: string }>(
      "SELECT count(*) AS n FROM events WHERE tenant = $1 AND object_type = 'charge' AND created_at >= $2",
      [tenant, since],
    );
    const events = Number(rows[0]!.n);
    for (;;) {
      const unique = await receiver.uniqueCount();
      if (unique - uniqueBefore >= events || Date.now() >= deadline) {
        const delivered = Math.min(events, unique - uniqueBefore);
        uniqueBefore = unique;
        return { events, delivered };
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  return { drain, receiverPid: receiver.pid };
}

async function block(side: Side, request: Extract<DriverRequest, { type: 'block' }>): Promise<BlockAnswer> {
  const since = side.drain === null ? null : (await side.ledger.query<{ now: Date }>('SELECT clock_timestamp() AS now')).rows[0]!.now;
  const startedAtMs = performance.now();
  const phase = await runClosedLoop({
    label: `${side.scenario} ${request.key}`,
    concurrency: request.concurrency,
    warmupMs: 0,
    durationMs: request.durationMs,
    maxOperations: blockMaxOperations,
    operation: side.operation(request.key),
  });
  const chargesDoneAtMs = performance.now();
  const deliveries = side.drain === null || since === null ? null : await side.drain(since);
  const endedAtMs = performance.now();
  return {
    completed: phase.completed,
    failed: phase.failed,
    chargesMs: chargesDoneAtMs - startedAtMs,
    elapsedMs: endedAtMs - startedAtMs,
    deliveryDrainMs: deliveries === null ? null : endedAtMs - chargesDoneAtMs,
    events: deliveries?.events ?? null,
    delivered: deliveries?.delivered ?? null,
    failureSamples: phase.failureSamples,
  };
}

async function verify(side: Side) {
  await settleUnsettled(side.session.charges, side.population.tenant, side.tally);
  return verifyScenario(side.ledger, side.population.tenant, side.tally.succeeded);
}

const answer = (value: DriverAnswer): Promise<void> =>
  new Promise((resolve, reject) => process.send!(value, (error: Error | null) => (error ? reject(error) : resolve())));

if (process.send === undefined) throw new Error('tree-ab-driver.ts runs under tree-ab.ts, with an IPC channel');
let side: Side | null = null;
const need = (): Side => {
  if (side === null) throw new Error('open first');
  return side;
};
// One request at a time: tree-ab.ts waits for each answer before it sends the next.
process.on('message', (message) => {
  const request = message as DriverRequest;
  const handle = async (): Promise<DriverAnswer> => {
    if (request.type === 'open') {
      side = await open(request);
      return side.receiverPid === null ? { ok: true } : { ok: true, receiverPid: side.receiverPid };
    }
    if (request.type === 'block') return { ok: true, block: await block(need(), request) };
    if (request.type === 'verify') return { ok: true, verification: await verify(need()) };
    await side?.close();
    side = null;
    return { ok: true };
  };
  void handle()
    .catch((error: unknown): DriverAnswer => {
      log(`tree-ab driver: ${(error as Error).stack ?? String(error)}`);
      return { ok: false, error: (error as Error).message };
    })
    .then(answer)
    .then(() => {
      // The Temporal runtime keeps native handles open: leave once the last answer is out.
      if (request.type === 'close') process.exit(0);
    });
});
