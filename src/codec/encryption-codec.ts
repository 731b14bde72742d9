import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import protoModule from '@temporalio/proto';
import { METADATA_ENCODING_KEY, type Payload, type PayloadCodec } from '@temporalio/common';
import { undecodablePayloadField } from '../domain/undecodable-payload.js';
import { isWellFormedKeyId, type PayloadKey, type PayloadKeyRing } from './key-ring.js';

const { Payload: PayloadMessage } = protoModule.temporal.api.common.v1;

/** The metadata an encrypted payload carries (the names Temporal's encryption samples use). */
export const encryptedEncoding = 'binary/encrypted';
export const encryptionKeyIdKey = 'encryption-key-id';

/** AES-256-GCM: a fresh 96-bit nonce per payload, a 128-bit tag. */
const cipher = 'aes-256-gcm';
const nonceBytes = 12;
const tagBytes = 16;

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

/** Why a payload could not be decrypted; `keyId` when the payload named one. */
export class PayloadDecryptionError extends Error {
  override readonly name = 'PayloadDecryptionError';
  constructor(
    message: string,
    readonly keyId: string | null,
  ) {
    super(message);
  }
}

export function isEncryptedPayload(payload: Payload): boolean {
  const encoding = payload.metadata?.[METADATA_ENCODING_KEY];
  return encoding !== undefined && encoding !== null && fromUtf8.decode(encoding) === encryptedEncoding;
}

/** The key id an encrypted payload names, or null. */
export function payloadKeyId(payload: Payload): string | null {
  const id = payload.metadata?.[encryptionKeyIdKey];
  return id ? fromUtf8.decode(id) : null;
}

/** What a codec does with a payload it cannot decode. */
export type UndecodablePolicy =
  /**
   * The worker's: hand the workflow the undecodable-payload value (src/domain/undecodable-payload.ts),
   * which fails the execution visibly. A throw would fail the workflow task, which Temporal retries
   * for ever: the execution would stay Running and its idempotency key taken.
   */
  | 'sentinel'
  /** A client's (API, MCP, CLI, codec endpoint): it starts no workflow code, so an error is the clear answer. */
  | 'throw';

/**
 * What a codec does with a payload that is not encrypted. `refuse` whenever keys are set: a
 * plaintext start is one the service did not make (`temporal workflow start --input '{...}'`).
 * `accept` passes it through, for a deployment that said so (CHARGEGUARD_PAYLOAD_PLAINTEXT=accept):
 * no keys at all, or histories written before its keys were set.
 */
export type PlaintextPolicy = 'refuse' | 'accept';

export interface EncryptionCodecOptions {
  onUndecodable: UndecodablePolicy;
  plaintext: PlaintextPolicy;
}

/**
 * Encrypts every payload (workflow and activity inputs and results, memos, queries, updates,
 * failures' details) with the ring's current key: the whole Payload message (its metadata and
 * data) becomes the ciphertext, so Temporal stores nothing of it in clear but the key id. The key
 * id is also the GCM additional data: a payload relabelled with another key id fails to decrypt.
 *
 * Without a ring (only with plaintext accepted) payloads go in clear both ways. Decoding what cannot
 * be decoded (a key not in the ring, a tag that does not verify, truncated bytes, plaintext refused)
 * is, per `onUndecodable`, an error naming the key id or the undecodable-payload value, never garbage.
 */
export class EncryptionCodec implements PayloadCodec {
  constructor(
    private readonly ring: PayloadKeyRing | null,
    private readonly options: EncryptionCodecOptions,
  ) {
    if (ring === null && options.plaintext === 'refuse') {
      throw new Error('a payload codec without keys that refuses plaintext could read nothing: give it keys or accept plaintext');
    }
  }

  async encode(payloads: Payload[]): Promise<Payload[]> {
    const ring = this.ring;
    return ring === null ? payloads : payloads.map((payload) => encryptPayload(payload, ring.current));
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => {
      try {
        return this.decodeOne(payload);
      } catch (error) {
        if (this.options.onUndecodable === 'throw' || !(error instanceof PayloadDecryptionError)) throw error;
        return undecodablePayload(error.message);
      }
    });
  }

  private decodeOne(payload: Payload): Payload {
    if (isEncryptedPayload(payload)) {
      if (this.ring === null) {
        const keyId = payloadKeyId(payload);
        const named = keyId !== null && isWellFormedKeyId(keyId) ? keyId : null;
        throw new PayloadDecryptionError(`payload encrypted with key ${named ?? '(none or malformed)'}, but this process has no payload keys`, named);
      }
      return decryptPayload(payload, this.ring);
    }
    if (this.options.plaintext === 'accept') return payload;
    throw new PayloadDecryptionError('plaintext refused: payload keys are set and this payload is not encrypted (a start the service did not make?)', null);
  }
}

/** The payload a worker's codec gives the workflow instead of one it cannot decode: JSON, the reason only. */
export function undecodablePayload(reason: string): Payload {
  return {
    metadata: { [METADATA_ENCODING_KEY]: utf8.encode('json/plain') },
    data: utf8.encode(JSON.stringify({ [undecodablePayloadField]: reason })),
  };
}

export function encryptPayload(payload: Payload, key: PayloadKey): Payload {
  const nonce = randomBytes(nonceBytes);
  const aes = createCipheriv(cipher, key.key, nonce, { authTagLength: tagBytes });
  aes.setAAD(utf8.encode(key.id));
  const plaintext = PayloadMessage.encode(payload).finish();
  const ciphertext = Buffer.concat([aes.update(plaintext), aes.final()]);
  return {
    metadata: {
      [METADATA_ENCODING_KEY]: utf8.encode(encryptedEncoding),
      [encryptionKeyIdKey]: utf8.encode(key.id),
    },
    data: Buffer.concat([nonce, ciphertext, aes.getAuthTag()]),
  };
}

export function decryptPayload(payload: Payload, ring: PayloadKeyRing): Payload {
  const keyId = payloadKeyId(payload);
  if (keyId === null) throw new PayloadDecryptionError(`an encrypted payload has no ${encryptionKeyIdKey}`, null);
  // The id comes from whoever wrote the payload: never echoed unless it is one a ring could hold.
  if (!isWellFormedKeyId(keyId)) throw new PayloadDecryptionError(`an encrypted payload names a malformed ${encryptionKeyIdKey}`, null);
  const key = ring.byId.get(keyId);
  if (!key) {
    throw new PayloadDecryptionError(`payload encrypted with key ${keyId}, which is not among the configured keys (${[...ring.byId.keys()].join(', ')})`, keyId);
  }
  const data = payload.data ?? new Uint8Array();
  if (data.length < nonceBytes + tagBytes) throw new PayloadDecryptionError(`payload encrypted with key ${keyId} is truncated`, keyId);
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  const aes = createDecipheriv(cipher, key.key, bytes.subarray(0, nonceBytes), { authTagLength: tagBytes });
  aes.setAAD(utf8.encode(keyId));
  aes.setAuthTag(bytes.subarray(bytes.length - tagBytes));
  let plaintext: Buffer;
  try {
    plaintext = Buffer.concat([aes.update(bytes.subarray(nonceBytes, bytes.length - tagBytes)), aes.final()]);
  } catch {
    // GCM says only "unable to authenticate": a wrong key under that id, or altered bytes.
    throw new PayloadDecryptionError(`payload encrypted with key ${keyId} does not authenticate (altered, or another key under that id)`, keyId);
  }
  return PayloadMessage.decode(plaintext);
}
