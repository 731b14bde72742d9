/**
 * `npm run chaos -- --kafka`: the queue intake under faults. Producers send signed charge requests
 * (each key one to three times, some at once, and a share of poison messages) while `chargeguard
 * consume` processes are SIGKILLed and the broker is restarted; then the verdict:
 *
 * - no key debited twice (the ledger's captures per key);
 * - every intake message decided or dead-lettered: each valid key has a result, each poison message
 *   a dead letter, and no poison key started anything;
 * - the consumer group's lag drained to 0;
 * - the event stream holds every event of the outbox (by event id).
 *
 * One machine: the dev Temporal and the embedded PostgreSQL, a worker in this process, the consumers
 * as processes of their own (so a SIGKILL is a real crash), a single-node Kafka.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NativeConnection } from '@temporalio/worker';
import { createApiKey } from '../src/auth/api-keys.js';
import { createAccount, deposit } from '../src/ledger/accounts.js';
import { migrateLedger } from '../src/ledger/migrate.js';
import { createLedgerPool } from '../src/ledger/pool.js';
import { eventStreamDefaults } from '../src/queue/event-stream.js';
import { GroupLag } from '../src/queue/group-lag.js';
import { intakeDefaults } from '../src/queue/settings.js';
import { startKafkaBroker, type KafkaBroker } from '../src/stack/kafka.js';
import { repoRoot } from '../src/support/repo-root.js';
import { startChargeguardStack } from '../src/runtime/local-stack.js';
import { createChargeWorker } from '../src/worker/charge-worker.js';
import { payloadProtectionFromSettings } from '../src/codec/payload-protection.js';
import { produce, signedRequest, TopicReader, type RawMessage } from '../test/support/kafka.js';

export interface KafkaChaosOptions {
  durationMs: number;
  consumers: number;
  /** SIGKILL a consumer this often (it is started again at once). */
  consumerKillEveryMs: number;
  brokerRestartEveryMs: number;
  /** How long after the storm the verdict waits for every message to be decided. */
  settleBudgetMs: number;
  /** New keys per second the producers send (each in 1-3 copies): below what the machine decides, so the run measures faults, not overload. */
  keysPerSecond: number;
}

const groupId = 'chaos-intake';
const poisonShare = 0.05;

export async function runKafkaChaos(options: KafkaChaosOptions): Promise<boolean> {
  const log = (line: string): void => void process.stderr.write(`[chaos --kafka ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
  const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-chaos-kafka-'));
  await chmod(dataDir, 0o711);
  const stack = await startChargeguardStack({ dataDir, temporalUiPort: null });
  let broker: KafkaBroker = await startKafkaBroker({ dataDir: join(dataDir, 'kafka'), logFilePath: join(dataDir, 'logs', 'kafka.log') });
  const brokers = [broker.brokers];
  const consumers: Array<ChildProcess | null> = [];
  const faults = { consumerKills: 0, brokerRestarts: 0 };
  let stopping = false;
  try {
    await migrateLedger(stack.migrationDatabaseUrl);
    const pool = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 8 });
    const connection = await NativeConnection.connect({ address: stack.temporalAddress });
    const payloadSettings = { CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFilePath! };
    const worker = await createChargeWorker({ connection, namespace: 'default', ledger: pool, payloadProtection: payloadProtectionFromSettings(payloadSettings) });
    const running = worker.run();
    try {
      const tenant = `chaos-kafka-${randomBytes(4).toString('hex')}`;
      for (const id of ['payer', 'payee']) await createAccount(pool, { tenant, id, currency: 'USD', allowOverdraft: false });
      await deposit(pool, tenant, 'payer', 1_000_000_000, 'chaos-kafka-funding');
      const key = await createApiKey(pool, tenant, 'chaos producer', 'agent', undefined, { requireSignature: true });
      const signer = { keyId: key.record.id, secret: key.signingSecret! };

      const env = { ...process.env, ...payloadSettings, TEMPORAL_ADDRESS: stack.temporalAddress, DATABASE_URL: stack.databaseUrl, KAFKA_BROKERS: brokers.join(',') };
      const startConsumer = (slot: number): void => {
        const child = spawn(process.execPath, ['--import', 'tsx', join(repoRoot(), 'src', 'cli', 'main.ts'), 'consume', '--group', groupId, '--metrics-port', '0'], {
          env,
          stdio: ['ignore', 'ignore', 'ignore'],
        });
        consumers[slot] = child;
        child.once('exit', () => {
          if (consumers[slot] === child) consumers[slot] = null;
          // A killed consumer is started again, as a supervisor would, until the run stops them all.
          if (!stopping) startConsumer(slot);
        });
      };
      for (let slot = 0; slot < options.consumers; slot++) startConsumer(slot);

      const reader = await TopicReader.open(brokers, [intakeDefaults.resultTopic, intakeDefaults.deadLetterTopic, eventStreamDefaults.topic]);
      const valid = new Set<string>();
      const poison = new Set<string>();
      let sent = 0;
      const stormEnds = Date.now() + options.durationMs;
      const killer = setInterval(() => {
        const slot = Math.floor(Math.random() * options.consumers);
        const child = consumers[slot];
        if (child && child.exitCode === null) {
          faults.consumerKills++;
          child.kill('SIGKILL');
        }
      }, options.consumerKillEveryMs);
      const restarter = setInterval(() => {
        void (async () => {
          faults.brokerRestarts++;
          log('restarting the broker');
          await broker.stop();
          broker = await startKafkaBroker({ dataDir: join(dataDir, 'kafka'), logFilePath: join(dataDir, 'logs', 'kafka.log'), port: broker.port, controllerPort: broker.controllerPort });
          log('broker back');
        })().catch((error: unknown) => log(`broker restart failed: ${(error as Error).message}`));
      }, options.brokerRestartEveryMs);
      try {
        while (Date.now() < stormEnds) {
          const batch: RawMessage[] = [];
          for (let i = 0; i < 10; i++) {
            const idempotencyKey = `k-${randomBytes(6).toString('hex')}`;
            if (Math.random() < poisonShare) {
              poison.add(idempotencyKey);
              batch.push({ ...signedRequest(intakeDefaults.requestTopic, signer, idempotencyKey, { amount: 1 }), value: '{"not": "signed like this"' });
              continue;
            }
            valid.add(idempotencyKey);
            const message = signedRequest(intakeDefaults.requestTopic, signer, idempotencyKey, { order_id: idempotencyKey, payer_account_id: 'payer', payee_account_id: 'payee', amount: 100, currency: 'USD' });
            const copies = 1 + Math.floor(Math.random() * 3);
            for (let c = 0; c < copies; c++) batch.push(message);
          }
          try {
            await produce(brokers, intakeDefaults.requestTopic, batch);
            sent += batch.length;
          } catch (error) {
            // The broker is restarting: the batch may be in part on the topic; its keys are left out of the verdict.
            log(`produce failed (${(error as Error).message}); the batch's keys are left out of the verdict`);
            for (const m of batch) (poison.has(m.key!) ? poison : valid).delete(m.key!);
          }
          // Ten keys a batch: one batch every 10 / keysPerSecond seconds.
          await new Promise((resolve) => setTimeout(resolve, (10 / options.keysPerSecond) * 1000));
        }
      } finally {
        clearInterval(killer);
        clearInterval(restarter);
      }
      log(`storm over: ${sent} messages sent (${valid.size} valid keys, ${poison.size} poison), ${faults.consumerKills} consumer kills, ${faults.brokerRestarts} broker restarts; settling`);

      const settleEnds = Date.now() + options.settleBudgetMs;
      const decided = (): { missing: string[]; missingLetters: string[] } => {
        const results = new Set(reader.of(intakeDefaults.resultTopic).map((m) => m.key));
        const letters = new Set(reader.of(intakeDefaults.deadLetterTopic).map((m) => m.key));
        return { missing: [...valid].filter((k) => !results.has(k)), missingLetters: [...poison].filter((k) => !letters.has(k)) };
      };
      while (Date.now() < settleEnds) {
        const { missing, missingLetters } = decided();
        if (missing.length === 0 && missingLetters.length === 0) break;
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
      const { missing, missingLetters } = decided();
      const lag = await groupLag(brokers, settleEnds);
      const twice = await pool.query<{ reference: string; n: number }>(
        "SELECT reference, count(*)::int AS n FROM transfers WHERE tenant = $1 AND kind = 'capture' GROUP BY reference HAVING count(*) > 1",
        [tenant],
      );
      const poisonStarted = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM charges WHERE tenant = $1 AND idempotency_key = ANY($2::text[])', [tenant, [...poison]]);
      const outbox = await pool.query<{ id: string }>('SELECT id FROM events');
      const onStream = new Set(reader.of(eventStreamDefaults.topic).map((m) => String(m.value.id)));
      const eventsMissing = outbox.rows.filter((r) => !onStream.has(r.id)).length;
      await reader.close();
      const verdict = [
        ['keys debited twice', twice.rows.length, 0],
        ['valid keys without a result', missing.length, 0],
        ['poison messages without a dead letter', missingLetters.length, 0],
        ['poison keys that started a charge', poisonStarted.rows[0]!.n, 0],
        ['consumer lag after settling', lag, 0],
        ['outbox events missing from the stream', eventsMissing, 0],
      ] as const;
      const lines = [
        `# chaos --kafka: ${Math.round(options.durationMs / 1000)} s storm, ${options.consumers} consumers`,
        '',
        `${sent} messages sent: ${valid.size} valid keys (1-3 copies each), ${poison.size} poison; ${faults.consumerKills} consumer SIGKILLs, ${faults.brokerRestarts} broker restarts; ${outbox.rows.length} outbox events.`,
        '',
        '| property | found | want |',
        '|---|---:|---:|',
        ...verdict.map(([name, found, want]) => `| ${name} | ${found} | ${want} |`),
      ];
      const ok = verdict.every(([, found, want]) => found === want);
      lines.push('', ok ? 'verdict: OK' : 'verdict: BROKEN');
      process.stdout.write(`${lines.join('\n')}\n`);
      return ok;
    } finally {
      stopping = true;
      for (const child of consumers) child?.kill('SIGTERM');
      await Promise.all(consumers.map((child) => (child && child.exitCode === null ? new Promise((resolve) => child.once('exit', resolve)) : null)));
      worker.shutdown();
      await running;
      await connection.close();
      await pool.end();
    }
  } finally {
    stopping = true;
    await broker.stop();
    await stack.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

/** The group's lag summed over the request topic's partitions, waiting (until `deadline`) for it to reach 0. */
async function groupLag(brokers: string[], deadline: number): Promise<number> {
  const lag = new GroupLag(brokers, groupId, intakeDefaults.requestTopic);
  try {
    for (;;) {
      const lags = await lag.read();
      const total = [...lags.values()].reduce((sum, lag) => sum + Number(lag), 0);
      if (total === 0 || Date.now() > deadline) return total;
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }
  } finally {
    await lag.close();
  }
}
