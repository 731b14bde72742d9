/**
 * `npm run bench:queue`: new charges per second through the queue intake (Kafka) against the HTTP
 * API, at the same concurrency, in the same run, on the same Temporal, PostgreSQL and worker; rounds
 * alternate (HTTP, queue, HTTP, queue …) so a drift of the machine shows in both. Figures, never a
 * pass/fail on time.
 *
 * Same concurrency: HTTP runs `concurrency` callers, each sending its next charge when the last one
 * is answered; the intake reads one partition with `maxInFlightPerPartition = concurrency`, so it
 * has at most that many charges in flight too. A queue round produces all its messages at once and
 * ends when the last result is on the result topic.
 */
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NativeConnection } from '@temporalio/worker';
import { buildApi } from '../src/api/app.js';
import { createApiKey } from '../src/auth/api-keys.js';
import { loadConfig } from '../src/config.js';
import { createAccount, deposit } from '../src/ledger/accounts.js';
import { migrateLedger } from '../src/ledger/migrate.js';
import { createLedgerPool } from '../src/ledger/pool.js';
import { ChargeIntake } from '../src/queue/intake.js';
import { intakeSettings } from '../src/queue/settings.js';
import { openAppContext } from '../src/runtime/app-context.js';
import { kafkaVersion, startKafkaBroker } from '../src/stack/kafka.js';
import { startChargeguardStack } from '../src/runtime/local-stack.js';
import { createChargeWorker } from '../src/worker/charge-worker.js';
import { payloadProtectionFromSettings } from '../src/codec/payload-protection.js';
import { produce, signedRequest, TopicReader } from '../test/support/kafka.js';
import { unthrottledLimits } from '../chaos/unthrottled-limits.js';

const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 16);
const chargesPerRound = Number(process.env.BENCH_CHARGES_PER_ROUND ?? 200);
const rounds = Number(process.env.BENCH_ROUNDS ?? 2);
const tenant = `queue-bench-${Date.now().toString(36)}`;

const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-queue-bench-'));
await chmod(dataDir, 0o711);
const stack = await startChargeguardStack({ dataDir, temporalUiPort: null });
const brokerStarted = Date.now();
const broker = await startKafkaBroker({ dataDir: join(dataDir, 'kafka'), logFilePath: join(dataDir, 'logs', 'kafka.log') });
const brokerStartMs = Date.now() - brokerStarted;
const lines: string[] = [];
try {
  await migrateLedger(stack.migrationDatabaseUrl);
  const pool = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 8 });
  const connection = await NativeConnection.connect({ address: stack.temporalAddress });
  const payloadSettings = { CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFilePath! };
  const worker = await createChargeWorker({ connection, namespace: 'default', ledger: pool, payloadProtection: payloadProtectionFromSettings(payloadSettings) });
  const running = worker.run();
  const config = loadConfig({
    ...payloadSettings,
    ...unthrottledLimits,
    CHARGE_ADMISSION_MAX_IN_FLIGHT: String(Math.max(64, concurrency * 2)),
  });
  const context = await openAppContext(config, { temporalAddress: stack.temporalAddress, databaseUrl: stack.databaseUrl });
  const app = await buildApi({ context });
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  const settings = intakeSettings([broker.brokers], { topicPartitions: 1, maxInFlightPerPartition: concurrency, groupId: 'bench' });
  const intake = new ChargeIntake({ context, settings, log: (line) => process.stderr.write(`${line}\n`) });
  try {
    for (const id of ['payer', 'payee']) await createAccount(pool, { tenant, id, currency: 'USD', allowOverdraft: false });
    await deposit(pool, tenant, 'payer', 1_000_000_000, 'queue-bench-funding');
    const key = await createApiKey(pool, tenant, 'queue bench', 'agent', undefined, { requireSignature: true });
    const plain = await createApiKey(pool, tenant, 'http bench');
    const signer = { keyId: key.record.id, secret: key.signingSecret! };
    await intake.start();
    const reader = await TopicReader.open([broker.brokers], [settings.resultTopic]);
    const body = (order: string) => ({ order_id: order, payer_account_id: 'payer', payee_account_id: 'payee', amount: 100, currency: 'USD' });

    const httpRound = async (round: number): Promise<number> => {
      let next = 0;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          for (let i = next++; i < chargesPerRound; i = next++) {
            const idempotencyKey = `http-${round}-${i}`;
            const response = await fetch(`${baseUrl}/v1/charges`, {
              method: 'POST',
              headers: { authorization: `Bearer ${plain.key}`, 'content-type': 'application/json', 'idempotency-key': idempotencyKey },
              body: JSON.stringify(body(idempotencyKey)),
            });
            await response.text();
            if (response.status !== 201) throw new Error(`HTTP charge ${idempotencyKey}: ${response.status}`);
          }
        }),
      );
      return (chargesPerRound / (performance.now() - started)) * 1000;
    };

    const queueRound = async (round: number): Promise<number> => {
      const keys = Array.from({ length: chargesPerRound }, (_, i) => `queue-${round}-${i}`);
      const started = performance.now();
      await produce([broker.brokers], settings.requestTopic, keys.map((k) => signedRequest(settings.requestTopic, signer, k, body(k))));
      const deadline = Date.now() + 600_000;
      const want = new Set(keys);
      while (reader.of(settings.resultTopic).filter((m) => want.has(m.key)).length < chargesPerRound) {
        if (Date.now() > deadline) throw new Error(`queue round ${round}: results missing after 600 s`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      const elapsed = performance.now() - started;
      const statuses = new Set(reader.of(settings.resultTopic).filter((m) => want.has(m.key)).map((m) => (m.value.charge as { status?: string } | undefined)?.status));
      if (statuses.size !== 1 || !statuses.has('succeeded')) throw new Error(`queue round ${round}: statuses ${[...statuses].join(', ')}`);
      return (chargesPerRound / elapsed) * 1000;
    };

    // One small round of each first: the JIT, the connections and the group's first assignment.
    await httpRound(-1);
    await queueRound(-1);
    const http: number[] = [];
    const queue: number[] = [];
    for (let round = 0; round < rounds; round += 1) {
      http.push(await httpRound(round));
      queue.push(await queueRound(round));
      process.stderr.write(`round ${round}: HTTP ${http.at(-1)!.toFixed(1)}/s, queue ${queue.at(-1)!.toFixed(1)}/s\n`);
    }
    const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
    lines.push(
      `# Queue intake vs HTTP (${new Date().toISOString().slice(0, 10)})`,
      '',
      `${chargesPerRound} new charges per round, ${rounds} rounds each, alternating; concurrency ${concurrency} (HTTP callers; intake in-flight per partition, one partition).`,
      `Kafka ${kafkaVersion} single node started in ${brokerStartMs} ms. Machine: ${(await import('node:os')).cpus().length} cores, shared.`,
      '',
      '| path | charges/s per round | mean |',
      '|---|---|---|',
      `| HTTP POST /v1/charges | ${http.map((v) => v.toFixed(1)).join(', ')} | ${mean(http).toFixed(1)} |`,
      `| queue intake (produce all, last result read) | ${queue.map((v) => v.toFixed(1)).join(', ')} | ${mean(queue).toFixed(1)} |`,
      '',
      `queue / HTTP: ${(mean(queue) / mean(http)).toFixed(2)}`,
    );
    await reader.close();
  } finally {
    await intake.stop();
    await app.close();
    await context.close();
    worker.shutdown();
    await running;
    await connection.close();
    await pool.end();
  }
} finally {
  await broker.stop();
  await stack.stop();
  await rm(dataDir, { recursive: true, force: true });
}
const report = lines.join('\n');
process.stdout.write(`${report}\n`);
await mkdir('bench/results', { recursive: true });
await writeFile(join('bench/results', `queue-intake-${new Date().toISOString().slice(0, 10)}.md`), `${report}\n`);
