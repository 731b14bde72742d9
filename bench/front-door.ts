/**
 * `npm run bench:front-door`: what the front door costs a request, measured against baselines in
 * the same process (figures and ratios, never a pass/fail on time).
 *
 * 1. Each check alone, called as the API calls it, on the real PostgreSQL: key lookup
 *    (authentication), role and mandate (pure), the rate limiter's statement, and a signature's
 *    verification with its nonce insert; next to a bare `SELECT 1` round trip.
 * 2. Over HTTP against a real API, Temporal and worker: replays of a decided charge with an
 *    ordinary key and with a key that requires signatures (every replay signed afresh), in
 *    alternating rounds; and new charges, for P3's ratio (replay p50 ≤ 0.1 × new p50) with the
 *    whole front door in the path.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NativeConnection } from '@temporalio/worker';
import { buildApi } from '../src/api/app.js';
import { createApiKey, principalForApiKey } from '../src/auth/api-keys.js';
import { authorize } from '../src/auth/principal.js';
import { admitRequest, rateLimitSettingsFrom } from '../src/auth/rate-limits.js';
import { acceptSignedRequest } from '../src/auth/request-signatures.js';
import { signRequest } from '../src/client/sign-request.js';
import { loadConfig } from '../src/config.js';
import { mandateRefusal, noMandate } from '../src/domain/mandate.js';
import { createAccount, deposit } from '../src/ledger/accounts.js';
import { migrateLedger } from '../src/ledger/migrate.js';
import { createLedgerPool } from '../src/ledger/pool.js';
import { openAppContext } from '../src/runtime/app-context.js';
import { createChargeWorker } from '../src/worker/charge-worker.js';
import { payloadProtectionFromSettings } from '../src/codec/payload-protection.js';
import { startChargeguardStack } from '../src/runtime/local-stack.js';

const checkIterations = 1_000;
const replayRounds = 6;
const replaysPerRound = 50;
const newCharges = 60;
const tenant = `frontdoor-${Date.now().toString(36)}`;

function percentile(samples: number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function timed(samples: number[], work: () => Promise<unknown> | unknown): Promise<void> {
  const startedAt = performance.now();
  await work();
  samples.push(performance.now() - startedAt);
}

const us = (ms: number): string => `${Math.round(ms * 1000)} µs`;

const dataDir = await mkdtemp(join(tmpdir(), 'chargeguard-front-door-'));
await chmod(dataDir, 0o711);
const stack = await startChargeguardStack({ dataDir, temporalUiPort: null });
const results: string[] = [];
try {
  await migrateLedger(stack.migrationDatabaseUrl);
  const pool = createLedgerPool({ databaseUrl: stack.databaseUrl, maxConnections: 8 });
  const connection = await NativeConnection.connect({ address: stack.temporalAddress });
  const payloadSettings = { CHARGEGUARD_PAYLOAD_KEYS_FILE: stack.payloadKeysFilePath! };
  const worker = await createChargeWorker({ connection, namespace: 'default', ledger: pool, payloadProtection: payloadProtectionFromSettings(payloadSettings) });
  const running = worker.run();
  // Ample limits: the measurement is the limiter's cost, not its refusals.
  const config = loadConfig({
    TEMPORAL_ADDRESS: stack.temporalAddress,
    DATABASE_URL: stack.databaseUrl,
    ...payloadSettings,
    RATE_LIMIT_KEY_PER_SECOND: '100000',
    RATE_LIMIT_KEY_BURST: '100000',
    RATE_LIMIT_TENANT_PER_SECOND: '100000',
    RATE_LIMIT_TENANT_BURST: '100000',
  });
  const context = await openAppContext(config, { temporalAddress: stack.temporalAddress, databaseUrl: stack.databaseUrl });
  const app = await buildApi({ context });
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  try {
    for (const id of ['payer', 'payee']) await createAccount(pool, { tenant, id, currency: 'USD', allowOverdraft: false });
    await deposit(pool, tenant, 'payer', 1_000_000_000, 'front-door-funding');
    const plain = await createApiKey(pool, tenant, 'front door: plain');
    const signing = await createApiKey(pool, tenant, 'front door: signed', 'agent', noMandate, { requireSignature: true });
    const settings = rateLimitSettingsFrom(config);
    const request = { orderId: 'o', payerAccountId: 'payer', payeeAccountId: 'payee', amountMinor: 100, currency: 'USD' };

    // 1. Each check alone.
    const samples = { roundTrip: [] as number[], authenticate: [] as number[], roleAndMandate: [] as number[], limiter: [] as number[], signature: [] as number[] };
    const principal = (await principalForApiKey(pool, plain.key))!;
    for (let i = 0; i < checkIterations; i += 1) {
      await timed(samples.roundTrip, () => pool.query('SELECT 1'));
      await timed(samples.authenticate, () => principalForApiKey(pool, plain.key));
      await timed(samples.roleAndMandate, () => {
        authorize(principal, 'charges.create');
        return mandateRefusal(principal.mandate ?? noMandate, request as never, Date.now());
      });
      await timed(samples.limiter, () => admitRequest(pool, settings, principal, { cost: 1, chargeKeys: ['replayed-key'] }));
      const body = Buffer.from(JSON.stringify({ i }));
      const url = `${baseUrl}/v1/charges`;
      const headers = { 'idempotency-key': `k-${i}`, 'content-type': 'application/json' };
      const signed = signRequest({ method: 'POST', url, headers, body: body.toString(), keyId: signing.record.id, secret: signing.signingSecret! });
      await timed(samples.signature, () =>
        acceptSignedRequest(pool, { method: 'POST', targetUri: url, headers: { ...headers, ...lower(signed) }, body }, { keyId: signing.record.id, secret: signing.signingSecret! }),
      );
    }
    const p50 = Object.fromEntries(Object.entries(samples).map(([name, values]) => [name, percentile(values, 50)])) as Record<keyof typeof samples, number>;
    const unsignedChecks = p50.authenticate + p50.roleAndMandate + p50.limiter;
    results.push('## Front door: each check alone (p50 of 1,000 calls, real PostgreSQL)', '', '| check | p50 | p99 |', '|---|---|---|');
    for (const [name, values] of Object.entries(samples)) results.push(`| ${name} | ${us(percentile(values, 50))} | ${us(percentile(values, 99))} |`);
    results.push(
      '',
      `auth + role + mandate + limiter: ${us(unsignedChecks)} p50 (${(unsignedChecks / p50.roundTrip).toFixed(1)} × a bare round trip); ` +
        `with a signature: ${us(unsignedChecks + p50.signature)}.`,
      '',
    );

    // 2. Over HTTP.
    const charge = async (apiKey: string, key: string, signWith?: { keyId: string; secret: string }): Promise<number> => {
      const url = `${baseUrl}/v1/charges`;
      const body = JSON.stringify({ order_id: key, payer_account_id: 'payer', payee_account_id: 'payee', amount: 100, currency: 'USD' });
      const headers: Record<string, string> = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'idempotency-key': key };
      const extra = signWith ? lower(signRequest({ method: 'POST', url, headers, body, keyId: signWith.keyId, secret: signWith.secret })) : {};
      const response = await fetch(url, { method: 'POST', headers: { ...headers, ...extra }, body });
      await response.text();
      if (response.status !== 200 && response.status !== 201) throw new Error(`charge ${key}: HTTP ${response.status}`);
      return response.status;
    };
    const signer = { keyId: signing.record.id, secret: signing.signingSecret! };
    const newMs: number[] = [];
    for (let i = 0; i < newCharges; i += 1) await timed(newMs, () => charge(plain.key, `new-${i}`));
    await charge(signing.key, 'signed-replayed', signer);
    const replay = { plain: [] as number[], signed: [] as number[] };
    const elapsed = { plain: 0, signed: 0 };
    for (let round = 0; round < replayRounds; round += 1) {
      for (const kind of round % 2 === 0 ? (['plain', 'signed'] as const) : (['signed', 'plain'] as const)) {
        const startedAt = performance.now();
        for (let i = 0; i < replaysPerRound; i += 1) {
          await timed(replay[kind], () => (kind === 'plain' ? charge(plain.key, 'new-0') : charge(signing.key, 'signed-replayed', signer)));
        }
        elapsed[kind] += performance.now() - startedAt;
      }
    }
    const perSecond = (kind: 'plain' | 'signed'): number => (replay[kind].length / elapsed[kind]) * 1000;
    const newP50 = percentile(newMs, 50);
    results.push(
      '## Over HTTP (one caller, sequential; API, Temporal dev server and worker in this process)',
      '',
      '| requests | n | per second | p50 | p99 |',
      '|---|---|---|---|---|',
      `| new charges (ordinary key) | ${newMs.length} | ${(newMs.length / (newMs.reduce((a, b) => a + b, 0) / 1000)).toFixed(1)} | ${newP50.toFixed(2)} ms | ${percentile(newMs, 99).toFixed(2)} ms |`,
      `| replays, ordinary key | ${replay.plain.length} | ${perSecond('plain').toFixed(0)} | ${percentile(replay.plain, 50).toFixed(2)} ms | ${percentile(replay.plain, 99).toFixed(2)} ms |`,
      `| replays, signed (each signed afresh) | ${replay.signed.length} | ${perSecond('signed').toFixed(0)} | ${percentile(replay.signed, 50).toFixed(2)} ms | ${percentile(replay.signed, 99).toFixed(2)} ms |`,
      '',
      `signed / ordinary replays per second: ${(perSecond('signed') / perSecond('plain')).toFixed(2)}; ` +
        `P3 over HTTP with the front door: replay p50 / new p50 = ${(percentile(replay.plain, 50) / newP50).toFixed(3)} (target ≤ 0.1), ` +
        `signed ${(percentile(replay.signed, 50) / newP50).toFixed(3)}.`,
    );
  } finally {
    await app.close();
    await context.close();
    worker.shutdown();
    await running;
    await connection.close();
    await pool.end();
  }
} finally {
  await stack.stop();
  await rm(dataDir, { recursive: true, force: true });
}
process.stdout.write(`${results.join('\n')}\n`);

function lower(headers: object): Record<string, string> {
  return Object.fromEntries(Object.entries(headers as Record<string, string>).map(([name, value]) => [name.toLowerCase(), value]));
}
