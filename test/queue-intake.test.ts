import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createApiKey, revokeApiKey } from '../src/auth/api-keys.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { noMandate, type Mandate } from '../src/domain/mandate.js';
import { loadConfig } from '../src/config.js';
import { ChargeIntake } from '../src/queue/intake.js';
import type { IntakeSettings } from '../src/queue/settings.js';
import { openAppContext, type AppContext } from '../src/runtime/app-context.js';
import {
  balanceOf,
  chargeBody,
  expectLedgerInvariants,
  fundedTenant,
  newKey,
  tenantLedgerFootprint,
  testPayloadSettings,
  useHarness,
  waitFor,
  workflowExists,
} from './support/harness.js';
import { produce, signedRequest, testIntakeSettings, TopicReader, useKafka, type Signer } from './support/kafka.js';

const h = useHarness();
const kafka = useKafka();
let context: AppContext;

beforeAll(async () => {
  const config = loadConfig({ CHARGE_WAIT_BUDGET_MS: '30000', ...testPayloadSettings() });
  const stack = inject('stack');
  context = await openAppContext(config, { temporalAddress: stack.temporalAddress, databaseUrl: stack.databaseUrl });
});
afterAll(async () => {
  await context?.close();
});

async function signingKey(tenant: string, mandate: Partial<Mandate> = {}): Promise<Signer> {
  const { record, signingSecret } = await createApiKey(h.pool, tenant, 'queue producer', 'agent', { ...noMandate, ...mandate }, { requireSignature: true });
  return { keyId: record.id, secret: signingSecret! };
}

/** An intake of the test's own (own topics and group), and a reader of its result and dead-letter topics. */
async function openIntake(overrides: Partial<IntakeSettings> = {}): Promise<{ settings: IntakeSettings; intake: ChargeIntake; reader: TopicReader; close(): Promise<void> }> {
  const settings = testIntakeSettings(kafka.brokers, overrides);
  const intake = new ChargeIntake({ context, settings, log: (line) => process.stderr.write(`${line}\n`) });
  await intake.start();
  const reader = await TopicReader.open(kafka.brokers, [settings.resultTopic, settings.deadLetterTopic]);
  return {
    settings,
    intake,
    reader,
    close: async () => {
      await intake.stop();
      await reader.close();
    },
  };
}

async function debitsOf(tenant: string, key: string): Promise<number> {
  const result = await h.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM transfers WHERE tenant = $1 AND reference = $2 AND kind = 'capture'", [tenant, key]);
  return result.rows[0]!.n;
}

async function chargesOf(tenant: string, key: string): Promise<number> {
  const result = await h.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM charges WHERE tenant = $1 AND idempotency_key = $2', [tenant, key]);
  return result.rows[0]!.n;
}

describe('queue intake on a real Kafka broker', () => {
  it('states the broker start time (single node, KRaft)', () => {
    expect(kafka.startMs).toBeGreaterThan(0);
    expect(kafka.startMs).toBeLessThan(120_000);
  });

  it('one message delivered five times, and five identical messages at once: one charge, five identical results', async () => {
    const tenant = await fundedTenant(h, { label: 'intake-dup' });
    const signer = await signingKey(tenant);
    const q = await openIntake();
    try {
      // Five deliveries of one message, one after the other (a producer retrying after a timeout).
      const sequentialKey = newKey('five-times');
      const message = signedRequest(q.settings.requestTopic, signer, sequentialKey, chargeBody({ amount: 700 }));
      for (let i = 0; i < 5; i++) await produce(kafka.brokers, q.settings.requestTopic, [message]);
      // Five identical messages in one batch: decided concurrently by the same consumer.
      const batchKey = newKey('five-at-once');
      const batchMessage = signedRequest(q.settings.requestTopic, signer, batchKey, chargeBody({ amount: 300 }));
      await produce(kafka.brokers, q.settings.requestTopic, Array.from({ length: 5 }, () => batchMessage));

      for (const [key, amount] of [[sequentialKey, 700], [batchKey, 300]] as const) {
        const results = await q.reader.waitForCount(q.settings.resultTopic, 5, key);
        expect(results).toHaveLength(5);
        expect(new Set(results.map((r) => r.raw)).size, 'five identical results').toBe(1);
        expect(results[0]!.value).toMatchObject({ object: 'charge_result', tenant, idempotency_key: key, outcome: 'charge', charge: { status: 'succeeded', amount, idempotency_key: key } });
        expect(results[0]!.headers).toMatchObject({ 'cg-tenant': tenant, 'cg-outcome': 'result' });
        expect(await chargesOf(tenant, key)).toBe(1);
        expect(await debitsOf(tenant, key)).toBe(1);
      }
      expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 1_000);
      expect(q.reader.of(q.settings.deadLetterTopic)).toEqual([]);
      const metrics = await q.intake.metrics.registry.getSingleMetricAsString('chargeguard_intake_messages_total');
      expect(metrics).toMatch(/chargeguard_intake_messages_total\{outcome="succeeded",reason=""\} 10/);
      // Every message committed: the group's lag drains to zero.
      await waitFor(async () => [...(await q.intake.lag()).values()].every((lag) => lag === 0n), { what: 'consumer lag 0' });
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      await q.close();
    }
  });

  it('poison messages go to the dead-letter topic with their reason, and start nothing', async () => {
    const tenant = await fundedTenant(h, { label: 'intake-poison' });
    const signer = await signingKey(tenant);
    const revoked = await signingKey(tenant);
    await revokeApiKey(h.pool, revoked.keyId);
    const plain = await createApiKey(h.pool, tenant, 'unsigned key', 'agent');
    const before = await tenantLedgerFootprint(h.pool, tenant);
    const q = await openIntake();
    try {
      const topic = q.settings.requestTopic;
      const keys = {
        notJson: newKey('not-json'),
        badSignature: newKey('bad-sig'),
        unknownField: newKey('unknown-field'),
        revoked: newKey('revoked'),
        unsigned: newKey('unsigned'),
        otherTopic: newKey('other-topic'),
        noSigningSecret: newKey('no-secret'),
        badKey: 'has space',
      };
      const tampered = signedRequest(topic, signer, keys.badSignature, chargeBody({ amount: 100 }));
      const signedForElsewhere = signedRequest('another-topic', signer, keys.otherTopic, chargeBody());
      await produce(kafka.brokers, topic, [
        signedRequest(topic, signer, keys.notJson, '{"amount": 100,'),
        { ...tampered, value: JSON.stringify(chargeBody({ amount: 9_000 })) },
        signedRequest(topic, signer, keys.unknownField, chargeBody({ surprise: true })),
        signedRequest(topic, revoked, keys.revoked, chargeBody()),
        { key: keys.unsigned, value: JSON.stringify(chargeBody()) },
        signedForElsewhere,
        signedRequest(topic, { keyId: plain.record.id, secret: 'cgsig_guess' }, keys.noSigningSecret, chargeBody()),
        signedRequest(topic, signer, keys.badKey, chargeBody()),
        { value: JSON.stringify(chargeBody()) },
      ]);
      const letters = await q.reader.waitForCount(q.settings.deadLetterTopic, 9);
      const reasonOf = (key: string) => letters.find((l) => l.key === key)?.value;
      expect(reasonOf(keys.notJson)).toMatchObject({ object: 'dead_letter', reason: 'malformed_json' });
      expect(reasonOf(keys.badSignature)).toMatchObject({ reason: 'bad_signature' });
      expect(reasonOf(keys.unknownField)).toMatchObject({ reason: 'invalid_request', errors: [expect.objectContaining({ field: expect.stringMatching(/surprise|body/) })] });
      expect(reasonOf(keys.revoked)).toMatchObject({ reason: 'revoked_key' });
      expect(reasonOf(keys.unsigned)).toMatchObject({ reason: 'unsigned' });
      expect(reasonOf(keys.otherTopic)).toMatchObject({ reason: 'bad_signature' });
      expect(reasonOf(keys.noSigningSecret)).toMatchObject({ reason: 'key_not_signing' });
      expect(reasonOf(keys.badKey)).toMatchObject({ reason: 'invalid_request', errors: [expect.objectContaining({ field: 'idempotency_key' })] });
      expect(letters.find((l) => l.value.reason === 'missing_key')).toBeDefined();
      // The original message travels with its reason.
      expect(Buffer.from(String(reasonOf(keys.notJson)!.value_base64), 'base64').toString()).toBe('{"amount": 100,');
      for (const key of Object.values(keys)) {
        expect(await workflowExists(h, chargeWorkflowId(tenant, key)), key).toBe(false);
      }
      expect(await tenantLedgerFootprint(h.pool, tenant)).toEqual(before);
      expect(q.reader.of(q.settings.resultTopic)).toEqual([]);
      const metrics = await q.intake.metrics.registry.getSingleMetricAsString('chargeguard_intake_messages_total');
      expect(metrics).toMatch(/outcome="dead_letter",reason="bad_signature"\} 2/);
    } finally {
      await q.close();
    }
  });

  it('a message signed by an agent key over its mandate is refused, the rule named in the result; nothing started', async () => {
    const tenant = await fundedTenant(h, { label: 'intake-mandate' });
    const signer = await signingKey(tenant, { maxAmountMinor: 500 });
    const before = await tenantLedgerFootprint(h.pool, tenant);
    const q = await openIntake();
    try {
      const key = newKey('over-mandate');
      await produce(kafka.brokers, q.settings.requestTopic, [signedRequest(q.settings.requestTopic, signer, key, chargeBody({ amount: 900 }))]);
      const [result] = await q.reader.waitForCount(q.settings.resultTopic, 1, key);
      expect(result!.value).toMatchObject({
        outcome: 'refused',
        idempotency_key: key,
        tenant,
        problem: { type: 'mandate_exceeded', status: 403, rule: 'max_amount' },
      });
      expect(await workflowExists(h, chargeWorkflowId(tenant, key))).toBe(false);
      expect(await tenantLedgerFootprint(h.pool, tenant)).toEqual(before);
    } finally {
      await q.close();
    }
  });

  it("a key's rate limit holds for queue messages too: over it they wait (Retry-After), then are charged; none refused, none lost", async () => {
    const tenant = await fundedTenant(h, { label: 'intake-rate' });
    const { record, signingSecret } = await createApiKey(h.pool, tenant, 'slow producer', 'agent', noMandate, { requireSignature: true }, { ratePerSecond: 1, burst: 1, maxOpenHolds: null });
    const signer = { keyId: record.id, secret: signingSecret! };
    const q = await openIntake();
    try {
      const keys = [newKey('rate-a'), newKey('rate-b'), newKey('rate-c')];
      await produce(kafka.brokers, q.settings.requestTopic, keys.map((key) => signedRequest(q.settings.requestTopic, signer, key, chargeBody({ amount: 100 }))));
      for (const key of keys) {
        const [result] = await q.reader.waitForCount(q.settings.resultTopic, 1, key);
        expect(result!.value, key).toMatchObject({ outcome: 'charge', charge: { status: 'succeeded' } });
        expect(await debitsOf(tenant, key)).toBe(1);
      }
      const retries = await q.intake.metrics.registry.getSingleMetricAsString('chargeguard_intake_retries_total');
      expect(Number(/chargeguard_intake_retries_total (\d+)/.exec(retries)?.[1])).toBeGreaterThan(0);
    } finally {
      await q.close();
    }
  });

  it('the broker restarted mid-stream: every message decided once, nothing lost, lag drained', async () => {
    const tenant = await fundedTenant(h, { label: 'intake-restart' });
    const signer = await signingKey(tenant);
    const q = await openIntake();
    try {
      const topic = q.settings.requestTopic;
      const before = Array.from({ length: 10 }, (_, i) => newKey(`before-${i}`));
      const after = Array.from({ length: 10 }, (_, i) => newKey(`after-${i}`));
      await produce(kafka.brokers, topic, before.map((key) => signedRequest(topic, signer, key, chargeBody({ amount: 100 }))));
      // Some decided, others maybe in flight when the broker goes away.
      await q.reader.waitForCount(q.settings.resultTopic, 1);
      const restartMs = await kafka.restart();
      process.stderr.write(`kafka broker restarted in ${restartMs} ms\n`);
      // The lag reading does not ride on the consumer the restart broke: it answers at once.
      expect([...(await q.intake.lag()).keys()]).toEqual([0, 1]);
      await produce(kafka.brokers, topic, after.map((key) => signedRequest(topic, signer, key, chargeBody({ amount: 100 }))));
      for (const key of [...before, ...after]) {
        const results = await q.reader.waitForCount(q.settings.resultTopic, 1, key, 120_000);
        expect(results[0]!.value, key).toMatchObject({ outcome: 'charge', charge: { status: 'succeeded' } });
        expect(await debitsOf(tenant, key), key).toBe(1);
      }
      expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 20 * 100);
      await waitFor(async () => [...(await q.intake.lag()).values()].every((lag) => lag === 0n), { timeoutMs: 60_000, what: 'consumer lag 0 after the restart' });
      await expectLedgerInvariants(h.pool, tenant);
    } finally {
      await q.close();
    }
  });

  it('chargeguard consume: its own process, serves /metrics with lag and per-outcome counts, stops cleanly on SIGTERM', async () => {
    const tenant = await fundedTenant(h, { label: 'intake-cli' });
    const signer = await signingKey(tenant);
    const settings = testIntakeSettings(kafka.brokers);
    const stack = inject('stack');
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', 'consume', '--group', settings.groupId, '--metrics-port', '0', '--no-events'], {
      env: {
        ...process.env,
        ...testPayloadSettings(),
        TEMPORAL_ADDRESS: stack.temporalAddress,
        DATABASE_URL: stack.databaseUrl,
        KAFKA_BROKERS: kafka.brokers.join(','),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const key = newKey('cli');
    try {
      const metricsUrl = await waitFor(async () => /metrics (http:\/\/127\.0\.0\.1:\d+\/metrics)/.exec(output)?.[1] ?? (child.exitCode !== null ? 'exited' : null), { timeoutMs: 90_000, what: 'consume to start' });
      expect(metricsUrl, output).not.toBe('exited');
      // The command's own topics (the defaults): requests to chargeguard.charge-requests.
      const reader = await TopicReader.open(kafka.brokers, ['chargeguard.charge-results']);
      try {
        await produce(kafka.brokers, 'chargeguard.charge-requests', [signedRequest('chargeguard.charge-requests', signer, key, chargeBody({ amount: 250 }))]);
        const [result] = await reader.waitForCount('chargeguard.charge-results', 1, key, 90_000);
        expect(result!.value).toMatchObject({ outcome: 'charge', charge: { status: 'succeeded', amount: 250 } });
      } finally {
        await reader.close();
      }
      const metrics = await waitFor(async () => {
        const text = await (await fetch(metricsUrl)).text();
        return /chargeguard_intake_consumer_lag\{partition="\d+"\} 0/.test(text) && !/chargeguard_intake_consumer_lag\{partition="\d+"\} [1-9]/.test(text) ? text : null;
      }, { what: 'lag 0 on /metrics' });
      expect(metrics).toMatch(/chargeguard_intake_messages_total\{outcome="succeeded",reason=""\} 1/);
      expect(metrics).toMatch(/chargeguard_intake_in_flight 0/);
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exited, output).toBe(0);
    expect(await debitsOf(tenant, key)).toBe(1);
  });

  it('a consumer SIGKILLed between start-or-attach and the commit: the redelivery attaches, one charge', async () => {
    const tenant = await fundedTenant(h, { label: 'intake-crash' });
    const signer = await signingKey(tenant);
    const settings = testIntakeSettings(kafka.brokers);
    const key = newKey('crash');
    const stack = inject('stack');
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/intake-crash-before-commit.ts'], {
      env: {
        ...process.env,
        ...testPayloadSettings(),
        TEMPORAL_ADDRESS: stack.temporalAddress,
        DATABASE_URL: stack.databaseUrl,
        INTAKE_SETTINGS_JSON: JSON.stringify(settings),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once('exit', (_code, signal) => resolve(signal)));
    await waitFor(async () => output.includes('intake ready') || child.exitCode !== null, { timeoutMs: 90_000, what: 'the crashing consumer to start' });
    await produce(kafka.brokers, settings.requestTopic, [signedRequest(settings.requestTopic, signer, key, chargeBody({ amount: 400 }))]);
    expect(await exited, output).toBe('SIGKILL');
    expect(output).toContain(`decided ${key}`);
    // The charge was made before the crash, and nothing was published or committed.
    expect(await workflowExists(h, chargeWorkflowId(tenant, key))).toBe(true);
    expect(await debitsOf(tenant, key)).toBe(1);

    const intake = new ChargeIntake({ context, settings, log: (line) => process.stderr.write(`${line}\n`) });
    await intake.start();
    const reader = await TopicReader.open(kafka.brokers, [settings.resultTopic, settings.deadLetterTopic]);
    try {
      const [result] = await reader.waitForCount(settings.resultTopic, 1, key, 90_000);
      expect(result!.value).toMatchObject({ outcome: 'charge', charge: { status: 'succeeded', amount: 400 } });
      expect(await chargesOf(tenant, key)).toBe(1);
      expect(await debitsOf(tenant, key)).toBe(1);
      expect((await balanceOf(h.pool, tenant, 'payer')).postedMinor).toBe(10_000 - 400);
      await waitFor(async () => [...(await intake.lag()).values()].every((lag) => lag === 0n), { what: 'consumer lag 0 after the redelivery' });
    } finally {
      await intake.stop();
      await reader.close();
    }
  });
});
