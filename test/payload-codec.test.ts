/**
 * Payloads in Temporal are ciphertext (docs/back-door.md): AES-256-GCM with the key id in each
 * payload's metadata, a key ring from CHARGEGUARD_PAYLOAD_KEYS (the first key encrypts, all
 * decrypt), and the remote codec endpoint the Web UI uses, behind the operator's token.
 */
import { randomBytes } from 'node:crypto';
import { Client } from '@temporalio/client';
import { METADATA_ENCODING_KEY, type Payload } from '@temporalio/common';
import protoModule from '@temporalio/proto';
import { NativeConnection, type Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { payloadDataConverter } from '../src/codec/data-converter.js';
import { EncryptionCodec, PayloadDecryptionError, encryptedEncoding, encryptionKeyIdKey } from '../src/codec/encryption-codec.js';
import { PayloadKeyRingError, parsePayloadKeyRing, type PayloadKeyRing } from '../src/codec/key-ring.js';
import { loadConfig } from '../src/config.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { IdempotencyConflictError } from '../src/service/errors.js';
import { createChargeWorker } from '../src/worker/charge-worker.js';
import { openTestApi, type TestApi } from './support/api.js';
import { balanceOf, chargeBody, newKey, newTenant, openAccount, useHarness } from './support/harness.js';

const h = useHarness();
const { History } = protoModule.temporal.api.history.v1;

const key32 = (): string => randomBytes(32).toString('base64');
const k1 = `k1:${key32()}`;
const k2 = `k2:${key32()}`;
const ringOf = (setting: string): PayloadKeyRing => parsePayloadKeyRing(setting)!;
const utf8 = (text: string): Uint8Array => new TextEncoder().encode(text);
const text = (bytes: Uint8Array | null | undefined): string => new TextDecoder().decode(bytes ?? new Uint8Array());
const plainPayload = (json: unknown): Payload => ({ metadata: { [METADATA_ENCODING_KEY]: utf8('json/plain') }, data: utf8(JSON.stringify(json)) });

describe('the key ring', () => {
  it('is off when unset or blank, and the first key encrypts', () => {
    expect(parsePayloadKeyRing(undefined)).toBeNull();
    expect(parsePayloadKeyRing('  ')).toBeNull();
    const ring = ringOf(`${k2},${k1}`);
    expect(ring.current.id).toBe('k2');
    expect([...ring.byId.keys()]).toEqual(['k2', 'k1']);
  });

  it('refuses malformed settings naming the entry, never echoing key material', () => {
    const short = randomBytes(16).toString('base64');
    const cases: [string, RegExp][] = [
      ['k1', /entry 1 is not <key id>:<base64 key>/],
      [`k1:${short}`, /entry 1: key k1 must be 32 bytes in base64/],
      [`${k1},k1:${key32()}`, /entry 2: key id k1 is given twice/],
      [`bad id:${key32()}`, /entry 1: the key id must be/],
      [`k1:${key32().slice(0, 43)}!`, /entry 1: key k1 must be 32 bytes/],
    ];
    for (const [setting, message] of cases) {
      const thrown = (() => {
        try {
          parsePayloadKeyRing(setting);
          return null;
        } catch (error) {
          return error as Error;
        }
      })();
      expect(thrown).toBeInstanceOf(PayloadKeyRingError);
      expect(thrown!.message).toMatch(message);
      expect(thrown!.message).not.toContain(setting.split(':')[1] ?? '\u0000');
    }
    expect(() => loadConfig({ CHARGEGUARD_PAYLOAD_KEYS: `k1:${short}` })).toThrow(/CHARGEGUARD_PAYLOAD_KEYS: CHARGEGUARD_PAYLOAD_KEYS entry 1/);
    expect(() => loadConfig({ CHARGEGUARD_CODEC_TOKEN: 'short' })).toThrow(/CHARGEGUARD_CODEC_TOKEN/);
  });
});

describe('the codec', () => {
  it('encrypts with the current key, decrypts with any key of the ring, passes unencrypted payloads through', async () => {
    const secret = `secret-${randomBytes(6).toString('hex')}`;
    const original = plainPayload({ payer_account_id: secret });
    const [sealed] = await new EncryptionCodec(ringOf(k1)).encode([original]);
    expect(text(sealed!.metadata![METADATA_ENCODING_KEY])).toBe(encryptedEncoding);
    expect(text(sealed!.metadata![encryptionKeyIdKey])).toBe('k1');
    expect(Buffer.from(sealed!.data!).includes(secret)).toBe(false);
    // Two encryptions of the same payload differ (a fresh nonce each time).
    const [again] = await new EncryptionCodec(ringOf(k1)).encode([original]);
    expect(Buffer.from(again!.data!).equals(Buffer.from(sealed!.data!))).toBe(false);

    // Rotation: k2 now encrypts, k1 still decrypts what it sealed.
    const rotated = new EncryptionCodec(ringOf(`${k2},${k1}`));
    const [opened] = await rotated.decode([sealed!]);
    expect(text(opened!.data)).toBe(text(original.data));
    expect(text(opened!.metadata![METADATA_ENCODING_KEY])).toBe('json/plain');
    const [resealed] = await rotated.encode([original]);
    expect(text(resealed!.metadata![encryptionKeyIdKey])).toBe('k2');

    // Histories written before encryption was turned on stay readable.
    const [passed] = await rotated.decode([original]);
    expect(passed).toBe(original);
  });

  it('refuses a payload whose key is gone, whose bytes changed, or whose key id was relabelled', async () => {
    const [sealed] = await new EncryptionCodec(ringOf(k1)).encode([plainPayload({ amount: 1 })]);
    await expect(new EncryptionCodec(ringOf(k2)).decode([sealed!])).rejects.toThrow(/encrypted with key k1, which is not among the configured keys \(k2\)/);

    const flipped = Buffer.from(sealed!.data!);
    flipped[20] = flipped[20]! ^ 1;
    await expect(new EncryptionCodec(ringOf(k1)).decode([{ ...sealed!, data: flipped }])).rejects.toBeInstanceOf(PayloadDecryptionError);

    // The same key material under another id: the key id is authenticated too.
    const sameKeyOtherId = ringOf(`k9:${k1.slice(3)},${k1}`);
    const relabelled = { ...sealed!, metadata: { ...sealed!.metadata, [encryptionKeyIdKey]: utf8('k9') } };
    await expect(new EncryptionCodec(sameKeyOtherId).decode([relabelled])).rejects.toThrow(/key k9 does not authenticate/);
  });
});

/**
 * Every Payload message in a history that the application wrote: inputs, results, local activity
 * results, memos, failures. Not search attributes (the server must read them to index them), not
 * patch markers (the SDK's own `{"id": <patch>, "deprecated": false}`) and not a local activity
 * marker's bookkeeping (the SDK's attempt, activity type and times): the SDK's core writes those
 * itself, past the codec.
 */
function payloadsIn(value: unknown, found: Payload[] = []): Payload[] {
  if (Array.isArray(value)) {
    for (const item of value) payloadsIn(item, found);
  } else if (value !== null && typeof value === 'object' && !(value instanceof Uint8Array)) {
    const record = value as Record<string, unknown>;
    if (record.markerName === 'core_patch') return found;
    if (record.markerName === 'core_local_activity') {
      const details = record.details as Record<string, unknown> | undefined;
      return payloadsIn([details?.result, record.failure], found);
    }
    if ('metadata' in record && 'data' in record) found.push(record as Payload);
    for (const [name, child] of Object.entries(record)) {
      if (name !== 'searchAttributes') payloadsIn(child, found);
    }
  }
  return found;
}

describe('charges with payload encryption on', () => {
  const taskQueue = `codec-${newKey('q')}`;
  let connection: NativeConnection;
  let worker: { worker: Worker; running: Promise<void> } | null = null;

  async function startWorker(keys: string): Promise<void> {
    const started = await createChargeWorker({
      connection,
      namespace: 'default',
      ledger: h.pool,
      taskQueue,
      holdSweeper: false,
      workflowBundle: { codePath: inject('stack').workflowBundlePath },
      dataConverter: payloadDataConverter(ringOf(keys)),
    });
    worker = { worker: started, running: started.run() };
  }

  async function stopWorker(): Promise<void> {
    if (!worker) return;
    worker.worker.shutdown();
    await worker.running;
    worker = null;
  }

  const serviceWith = (keys: string) =>
    h.clientFor({ taskQueue, temporal: new Client({ connection: h.connection, namespace: 'default', dataConverter: payloadDataConverter(ringOf(keys)) }) });

  beforeAll(async () => {
    connection = await NativeConnection.connect({ address: inject('stack').temporalAddress });
  });
  afterAll(async () => {
    await stopWorker();
    await connection?.close();
  });

  it('a charge succeeds end to end while Temporal stores only ciphertext', async () => {
    await startWorker(k1);
    const tenant = newTenant('codec');
    const payer = `acct-${randomBytes(6).toString('hex')}`;
    await openAccount(h.pool, tenant, payer, { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    const secret = `note-${randomBytes(8).toString('hex')}`;
    const key = newKey('enc');
    const { charge } = await serviceWith(k1).charge(tenant, key, chargeBody({ payer_account_id: payer, amount: 1_500, metadata: { note: secret } }));
    expect(charge).toMatchObject({ status: 'succeeded', amountCapturedMinor: 1_500, metadata: { note: secret } });
    expect(await balanceOf(h.pool, tenant, payer)).toMatchObject({ postedMinor: 8_500 });
    // A retry answers the same charge; another request under the key is a conflict.
    const body = chargeBody({ payer_account_id: payer, amount: 1_500, metadata: { note: secret } });
    await expect(serviceWith(k1).charge(tenant, key, { ...body, order_id: charge.orderId })).resolves.toMatchObject({ charge: { id: charge.id, status: 'succeeded' } });
    await expect(serviceWith(k1).charge(tenant, key, { ...body, order_id: charge.orderId, amount: 1_501 })).rejects.toBeInstanceOf(IdempotencyConflictError);

    // Read as someone with access to Temporal but not the keys would: no codec.
    const history = await h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).fetchHistory();
    const payloads = payloadsIn(history.events);
    const started = history.events![0]!.workflowExecutionStartedEventAttributes!;
    expect(payloads.length).toBeGreaterThanOrEqual(3); // input, the ledger steps' results, the result
    for (const payload of payloads) {
      expect(text(payload.metadata![METADATA_ENCODING_KEY])).toBe(encryptedEncoding);
      expect(text(payload.metadata![encryptionKeyIdKey])).toBe('k1');
    }
    expect(Buffer.from(started.input!.payloads![0]!.data!).includes(payer)).toBe(false);
    // The metadata's note is nowhere in the stored history, not even outside payloads.
    expect(Buffer.from(History.encode(history).finish()).includes(secret)).toBe(false);
  });

  it('rotation: a hold started under k1 is captured after k2 is put first, and the old payloads still decrypt', async () => {
    await stopWorker();
    await startWorker(k1);
    const tenant = newTenant('rotate');
    await openAccount(h.pool, tenant, 'payer', { depositMinor: 10_000 });
    await openAccount(h.pool, tenant, 'payee');
    const key = newKey('rotate');
    const held = await serviceWith(k1).charge(tenant, key, chargeBody({ amount: 700, capture: 'manual' }));
    expect(held.charge.status).toBe('reserved');

    // New keys, new worker: the hold's workflow is replayed from its k1 history by a k2-first worker.
    await stopWorker();
    await startWorker(`${k2},${k1}`);
    const captured = await serviceWith(`${k2},${k1}`).captureCharge(tenant, key, null);
    expect(captured).toMatchObject({ status: 'succeeded', amountCapturedMinor: 700 });

    const history = await h.temporal.workflow.getHandle(chargeWorkflowId(tenant, key)).fetchHistory();
    const keyIds = new Set(payloadsIn(history.events).map((payload) => text(payload.metadata![encryptionKeyIdKey])));
    expect(keyIds).toEqual(new Set(['k1', 'k2']));
    expect(await balanceOf(h.pool, tenant, 'payer')).toMatchObject({ postedMinor: 9_300, pendingMinor: 0 });
  });
});

describe('the codec endpoint (Temporal remote codec protocol) on the API', () => {
  const token = randomBytes(32).toString('base64url');
  const uiOrigin = 'http://127.0.0.1:8233';
  let api: TestApi;
  beforeAll(async () => {
    api = await openTestApi({ env: { CHARGEGUARD_PAYLOAD_KEYS: `${k2},${k1}`, CHARGEGUARD_CODEC_TOKEN: token } });
  });
  afterAll(async () => {
    await api?.close();
  });

  const asJson = (payload: Payload) => ({
    metadata: Object.fromEntries(Object.entries(payload.metadata ?? {}).map(([name, value]) => [name, Buffer.from(value!).toString('base64')])),
    data: Buffer.from(payload.data!).toString('base64'),
  });

  it('refuses without the token, with a wrong one, and with a tenant API key', async () => {
    const [sealed] = await new EncryptionCodec(ringOf(k1)).encode([plainPayload({ a: 1 })]);
    const body = { payloads: [asJson(sealed!)] };
    const tenant = newTenant('codec-auth');
    for (const authorization of [undefined, `Bearer ${token}x`, `Bearer ${await api.keyFor(tenant, 'admin')}`]) {
      const res = await api.request('/codec/decode', { body, headers: authorization ? { authorization } : {} });
      expect(res.status).toBe(401);
      expect(res.headers.get('content-type')).toContain('application/problem+json');
      expect(res.body).toMatchObject({ type: 'unauthorized' });
      expect(res.text).not.toContain('"a":1');
    }
  });

  it('decodes with the token (a payload sealed by the old key), and encodes with the current key', async () => {
    const original = plainPayload({ payer_account_id: 'acct-visible' });
    const [sealed] = await new EncryptionCodec(ringOf(k1)).encode([original]);
    const decoded = await api.request('/codec/decode', {
      body: { payloads: [asJson(sealed!), asJson(original)] },
      headers: { authorization: `Bearer ${token}`, 'x-namespace': 'default', origin: uiOrigin },
    });
    expect(decoded.status).toBe(200);
    expect(decoded.headers.get('access-control-allow-origin')).toBe(uiOrigin);
    expect(decoded.body.payloads).toHaveLength(2);
    for (const payload of decoded.body.payloads as { metadata: Record<string, string>; data: string }[]) {
      expect(Buffer.from(payload.metadata.encoding!, 'base64').toString()).toBe('json/plain');
      expect(JSON.parse(Buffer.from(payload.data, 'base64').toString())).toEqual({ payer_account_id: 'acct-visible' });
    }

    const encoded = await api.request('/codec/encode', { body: { payloads: [asJson(original)] }, headers: { authorization: `Bearer ${token}` } });
    expect(encoded.status).toBe(200);
    const [out] = encoded.body.payloads as { metadata: Record<string, string>; data: string }[];
    expect(Buffer.from(out!.metadata[encryptionKeyIdKey]!, 'base64').toString()).toBe('k2');
    expect(Buffer.from(out!.data, 'base64').includes('acct-visible')).toBe(false);
  });

  it('answers the Web UI preflight for its origin only, and names what is wrong with a bad body', async () => {
    const preflight = await fetch(`${api.baseUrl}/codec/decode`, {
      method: 'OPTIONS',
      headers: { origin: uiOrigin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type,x-namespace' },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe(uiOrigin);
    expect(preflight.headers.get('access-control-allow-headers')).toMatch(/Authorization/);
    const stranger = await fetch(`${api.baseUrl}/codec/decode`, { method: 'OPTIONS', headers: { origin: 'https://evil.example' } });
    expect(stranger.status).toBe(403);
    expect(stranger.headers.get('access-control-allow-origin')).toBeNull();

    const auth = { authorization: `Bearer ${token}` };
    const missing = await api.request('/codec/decode', { body: {}, headers: auth });
    expect(missing.status).toBe(400);
    expect(missing.body.errors).toEqual([{ field: 'payloads', message: 'must be an array of payloads' }]);
    const badData = await api.request('/codec/decode', { body: { payloads: [{ metadata: {}, data: 'not base64!' }] }, headers: auth });
    expect(badData.status).toBe(400);
    expect(badData.body.errors).toEqual([{ field: 'payloads[0].data', message: 'is not base64' }]);
    const [foreign] = await new EncryptionCodec(ringOf(`k7:${key32()}`)).encode([plainPayload({})]);
    const unknownKey = await api.request('/codec/decode', { body: { payloads: [asJson(foreign!)] }, headers: auth });
    expect(unknownKey.status).toBe(400);
    expect(unknownKey.body).toMatchObject({ type: 'payload_not_decodable', detail: expect.stringContaining('key k7') });
  });

  it('does not exist without a codec token configured', async () => {
    const plain = await openTestApi({ env: { CHARGEGUARD_PAYLOAD_KEYS: k1 } });
    try {
      const res = await plain.request('/codec/decode', { body: { payloads: [] }, headers: { authorization: `Bearer ${token}` } });
      expect(res.status).toBe(404);
    } finally {
      await plain.close();
    }
  });
});
