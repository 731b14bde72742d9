/**
 * Payloads in Temporal are ciphertext (docs/back-door.md): AES-256-GCM with the key id in each
 * payload's metadata, a key ring from CHARGEGUARD_PAYLOAD_KEYS or its file (the first key encrypts,
 * all decrypt), plaintext refused, the worker's and the client's variants of the codec, and the
 * remote codec endpoint the Web UI uses, behind the operator's token.
 */
import { randomBytes } from 'node:crypto';
import { Client } from '@temporalio/client';
import { METADATA_ENCODING_KEY, type Payload } from '@temporalio/common';
import protoModule from '@temporalio/proto';
import { NativeConnection, type Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { clientDataConverter, workerDataConverter } from '../src/codec/data-converter.js';
import { EncryptionCodec, PayloadDecryptionError, encryptedEncoding, encryptionKeyIdKey, type EncryptionCodecOptions } from '../src/codec/encryption-codec.js';
import { parseWorkerIdentity, workerIdentity } from '../src/codec/key-advertisement.js';
import { PayloadKeyRingError, keyCheckValue, parsePayloadKeyRing, type PayloadKeyRing } from '../src/codec/key-ring.js';
import { PayloadProtectionError, payloadProtectionFromSettings } from '../src/codec/payload-protection.js';
import { isUndecodablePayload, undecodablePayloadField } from '../src/domain/undecodable-payload.js';
import { loadConfig } from '../src/config.js';
import { chargeWorkflowId } from '../src/domain/charge.js';
import { IdempotencyConflictError } from '../src/domain/errors.js';
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
/** The two variants: a client's throws on what it cannot decode, a worker's hands over the undecodable-payload value. */
const clientCodec = (ring: PayloadKeyRing | null, plaintext: EncryptionCodecOptions['plaintext'] = 'refuse') => new EncryptionCodec(ring, { onUndecodable: 'throw', plaintext });
const workerCodec = (ring: PayloadKeyRing | null, plaintext: EncryptionCodecOptions['plaintext'] = 'refuse') => new EncryptionCodec(ring, { onUndecodable: 'sentinel', plaintext });
/** The reason a worker's codec gave for a payload, or null when it decoded it. */
const undecodableReason = (payload: Payload): string | null => {
  if (text(payload.metadata![METADATA_ENCODING_KEY]) !== 'json/plain') return null;
  const value: unknown = JSON.parse(text(payload.data));
  return isUndecodablePayload(value) ? value.undecodablePayload : null;
};

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
  it('encrypts with the current key, decrypts with any key of the ring, passes plaintext through only when told to accept it', async () => {
    const secret = `secret-${randomBytes(6).toString('hex')}`;
    const original = plainPayload({ payer_account_id: secret });
    const [sealed] = await clientCodec(ringOf(k1)).encode([original]);
    expect(text(sealed!.metadata![METADATA_ENCODING_KEY])).toBe(encryptedEncoding);
    expect(text(sealed!.metadata![encryptionKeyIdKey])).toBe('k1');
    expect(Buffer.from(sealed!.data!).includes(secret)).toBe(false);
    // Two encryptions of the same payload differ (a fresh nonce each time).
    const [again] = await clientCodec(ringOf(k1)).encode([original]);
    expect(Buffer.from(again!.data!).equals(Buffer.from(sealed!.data!))).toBe(false);

    // Rotation: k2 now encrypts, k1 still decrypts what it sealed.
    const rotated = clientCodec(ringOf(`${k2},${k1}`));
    const [opened] = await rotated.decode([sealed!]);
    expect(text(opened!.data)).toBe(text(original.data));
    expect(text(opened!.metadata![METADATA_ENCODING_KEY])).toBe('json/plain');
    const [resealed] = await rotated.encode([original]);
    expect(text(resealed!.metadata![encryptionKeyIdKey])).toBe('k2');

    // Plaintext with keys set: refused by default (a start the service did not make), read when the
    // deployment accepts it (histories written before its keys were set).
    await expect(rotated.decode([original])).rejects.toThrow(/plaintext refused/);
    const [passed] = await clientCodec(ringOf(`${k2},${k1}`), 'accept').decode([original]);
    expect(passed).toBe(original);
    // No keys and plaintext accepted: in clear both ways. No keys and plaintext refused reads nothing: refused at once.
    expect(await clientCodec(null, 'accept').encode([original])).toEqual([original]);
    expect(() => clientCodec(null, 'refuse')).toThrow(/could read nothing/);
  });

  it('refuses a payload whose key is gone, whose bytes changed, or whose key id was relabelled', async () => {
    const [sealed] = await clientCodec(ringOf(k1)).encode([plainPayload({ amount: 1 })]);
    await expect(clientCodec(ringOf(k2)).decode([sealed!])).rejects.toThrow(/encrypted with key k1, which is not among the configured keys \(k2\)/);

    const flipped = Buffer.from(sealed!.data!);
    flipped[20] = flipped[20]! ^ 1;
    await expect(clientCodec(ringOf(k1)).decode([{ ...sealed!, data: flipped }])).rejects.toBeInstanceOf(PayloadDecryptionError);

    // The same key material under another id: the key id is authenticated too.
    const sameKeyOtherId = ringOf(`k9:${k1.slice(3)},${k1}`);
    const relabelled = { ...sealed!, metadata: { ...sealed!.metadata, [encryptionKeyIdKey]: utf8('k9') } };
    await expect(clientCodec(sameKeyOtherId).decode([relabelled])).rejects.toThrow(/key k9 does not authenticate/);
  });

  it("the worker's variant never throws: what it cannot decode becomes the undecodable-payload value, naming why but no key material", async () => {
    const [sealed] = await clientCodec(ringOf(k1)).encode([plainPayload({ amount: 1 })]);
    const flipped = Buffer.from(sealed!.data!);
    flipped[20] = flipped[20]! ^ 1;
    const cases: Array<[string, Payload, PayloadKeyRing, RegExp]> = [
      ['plaintext', plainPayload({ amount: 1 }), ringOf(k1), /^plaintext refused/],
      ['unknown key id', sealed!, ringOf(k2), /key k1, which is not among the configured keys \(k2\)/],
      ['tag does not verify', { ...sealed!, data: flipped }, ringOf(k1), /key k1 does not authenticate/],
      ['truncated', { ...sealed!, data: sealed!.data!.subarray(0, 10) }, ringOf(k1), /key k1 is truncated/],
      ['malformed key id', { ...sealed!, metadata: { ...sealed!.metadata, [encryptionKeyIdKey]: utf8('x'.repeat(5_000)) } }, ringOf(k1), /malformed encryption-key-id/],
    ];
    for (const [label, payload, ring, reason] of cases) {
      const [decoded] = await workerCodec(ring).decode([payload]);
      expect(undecodableReason(decoded!), label).toMatch(reason);
      expect(Object.keys(JSON.parse(text(decoded!.data))), label).toEqual([undecodablePayloadField]);
      for (const material of [k1, k2].map((entry) => entry.slice(3))) expect(text(decoded!.data), label).not.toContain(material);
    }
    // What it can decode, it decodes; a batch with one bad payload keeps the others.
    const [good, bad] = await workerCodec(ringOf(k1)).decode([sealed!, plainPayload({ forged: true })]);
    expect(JSON.parse(text(good!.data))).toEqual({ amount: 1 });
    expect(undecodableReason(bad!)).toMatch(/plaintext refused/);
  });
});

describe('the payload settings', () => {
  it('need keys, a key file or an explicit acceptance of plaintext, and name both ways when neither is given', async () => {
    expect(() => payloadProtectionFromSettings({})).toThrow(PayloadProtectionError);
    expect(() => payloadProtectionFromSettings({})).toThrow(/CHARGEGUARD_PAYLOAD_KEYS.*CHARGEGUARD_PAYLOAD_PLAINTEXT=accept/);
    expect(payloadProtectionFromSettings({ CHARGEGUARD_PAYLOAD_PLAINTEXT: 'accept' })).toMatchObject({ ring: null, plaintext: 'accept' });
    expect(() => payloadProtectionFromSettings({ CHARGEGUARD_PAYLOAD_PLAINTEXT: 'yes' })).toThrow(/CHARGEGUARD_PAYLOAD_PLAINTEXT=yes is not one of refuse, accept/);
    expect(payloadProtectionFromSettings({ CHARGEGUARD_PAYLOAD_KEYS: `${k2},${k1}` })).toMatchObject({ plaintext: 'refuse', ring: { current: { id: 'k2' } } });
    expect(() => loadConfig({ CHARGEGUARD_PAYLOAD_PLAINTEXT: 'maybe' })).toThrow(/CHARGEGUARD_PAYLOAD_PLAINTEXT/);

    const dir = await mkdtemp(join(tmpdir(), 'chargeguard-keys-'));
    try {
      const file = join(dir, 'keys');
      await writeFile(file, `# rotated\n${k2}\n${k1}\n`, { mode: 0o600 });
      const fromFile = payloadProtectionFromSettings({ CHARGEGUARD_PAYLOAD_KEYS_FILE: file });
      expect([...fromFile.ring!.byId.keys()]).toEqual(['k2', 'k1']);
      expect(fromFile.source).toBe(`CHARGEGUARD_PAYLOAD_KEYS_FILE=${file}`);
      expect(() => payloadProtectionFromSettings({ CHARGEGUARD_PAYLOAD_KEYS_FILE: file, CHARGEGUARD_PAYLOAD_KEYS: k1 })).toThrow(/both set/);
      expect(() => payloadProtectionFromSettings({ CHARGEGUARD_PAYLOAD_KEYS_FILE: join(dir, 'absent') })).toThrow(/CHARGEGUARD_PAYLOAD_KEYS_FILE=.*absent cannot be read: no such file/);
      await writeFile(file, 'k1:tooshort\n');
      await chmod(file, 0o600);
      const thrown = (() => {
        try {
          payloadProtectionFromSettings({ CHARGEGUARD_PAYLOAD_KEYS_FILE: file });
          return null;
        } catch (error) {
          return error as Error;
        }
      })();
      expect(thrown?.message).toMatch(/CHARGEGUARD_PAYLOAD_KEYS_FILE \(.*\) entry 1: key k1 must be 32 bytes/);
      expect(thrown?.message).not.toContain('tooshort');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("a worker's identity advertises its key ids with check values that tell keys apart without showing them", () => {
    const ring = ringOf(`${k2},${k1}`);
    const identity = workerIdentity({ ring, plaintext: 'refuse' });
    expect(identity).toMatch(new RegExp(`^${process.pid}@\\S+ payload-keys=k2~[0-9a-f]{16},k1~[0-9a-f]{16} plaintext=refuse$`));
    expect(parseWorkerIdentity(identity)).toEqual({
      keys: [
        { id: 'k2', check: keyCheckValue(ring.current) },
        { id: 'k1', check: keyCheckValue(ring.byId.get('k1')!) },
      ],
      plaintext: 'refuse',
    });
    for (const entry of [k1, k2]) expect(identity).not.toContain(entry.slice(3));
    // The same id over another key: another check value.
    expect(keyCheckValue(ringOf(`k1:${key32()}`).current)).not.toBe(keyCheckValue(ring.byId.get('k1')!));
    expect(parseWorkerIdentity(workerIdentity({ ring: null, plaintext: 'accept' }))).toEqual({ keys: [], plaintext: 'accept' });
    expect(parseWorkerIdentity('1234@host')).toBeNull();
  });

  it('the data converters: a client and a worker variant of one codec, none at all for plaintext without keys', () => {
    const client = clientDataConverter({ ring: ringOf(k1), plaintext: 'refuse' }).payloadCodecs![0] as unknown as { options: EncryptionCodecOptions };
    const worker = workerDataConverter({ ring: ringOf(k1), plaintext: 'refuse' }).payloadCodecs![0] as unknown as { options: EncryptionCodecOptions };
    expect(client.options).toEqual({ onUndecodable: 'throw', plaintext: 'refuse' });
    expect(worker.options).toEqual({ onUndecodable: 'sentinel', plaintext: 'refuse' });
    expect(workerDataConverter({ ring: null, plaintext: 'accept' })).toEqual({});
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
      payloadProtection: { ring: ringOf(keys), plaintext: 'refuse' },
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
    h.clientFor({ taskQueue, temporal: new Client({ connection: h.connection, namespace: 'default', dataConverter: clientDataConverter({ ring: ringOf(keys), plaintext: 'refuse' }) }) });

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
    // Not the shared worker's keys: this API starts no charge, it only serves the endpoint.
    api = await openTestApi({ env: { CHARGEGUARD_PAYLOAD_KEYS: `${k2},${k1}`, CHARGEGUARD_CODEC_TOKEN: token }, checkWorkerKeys: false });
  });
  afterAll(async () => {
    await api?.close();
  });

  const asJson = (payload: Payload) => ({
    metadata: Object.fromEntries(Object.entries(payload.metadata ?? {}).map(([name, value]) => [name, Buffer.from(value!).toString('base64')])),
    data: Buffer.from(payload.data!).toString('base64'),
  });

  it('refuses without the token, with a wrong one, and with a tenant API key', async () => {
    const [sealed] = await clientCodec(ringOf(k1)).encode([plainPayload({ a: 1 })]);
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
    const [sealed] = await clientCodec(ringOf(k1)).encode([original]);
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
    const [foreign] = await clientCodec(ringOf(`k7:${key32()}`)).encode([plainPayload({})]);
    const unknownKey = await api.request('/codec/decode', { body: { payloads: [asJson(foreign!)] }, headers: auth });
    expect(unknownKey.status).toBe(400);
    expect(unknownKey.body).toMatchObject({ type: 'payload_not_decodable', detail: expect.stringContaining('key k7') });
  });

  it('does not exist without a codec token configured', async () => {
    const plain = await openTestApi({ env: { CHARGEGUARD_PAYLOAD_KEYS: k1 }, checkWorkerKeys: false });
    try {
      const res = await plain.request('/codec/decode', { body: { payloads: [] }, headers: { authorization: `Bearer ${token}` } });
      expect(res.status).toBe(404);
    } finally {
      await plain.close();
    }
  });
});
