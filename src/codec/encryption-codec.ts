import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import protoModule from '@temporalio/proto';
import { METADATA_ENCODING_KEY, type Payload, type PayloadCodec } from '@temporalio/common';
import type { PayloadKey, PayloadKeyRing } from './key-ring.js';

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

/**
 * Encrypts every payload (workflow and activity inputs and results, memos, queries, updates,
 * failures' details) with the ring's current key: the whole Payload message (its metadata and
 * data) becomes the ciphertext, so Temporal stores nothing of it in clear but the key id. The key
 * id is also the GCM additional data: a payload relabelled with another key id fails to decrypt.
 *
 * Decoding passes unencrypted payloads through unchanged: histories written before encryption was
 * turned on (and the dev default, encryption off) stay readable. An encrypted payload whose key is
 * not in the ring, or whose tag does not verify, is an error naming the key id, never garbage.
 */
export class EncryptionCodec implements PayloadCodec {
  constructor(private readonly ring: PayloadKeyRing) {}

  async encode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => encryptPayload(payload, this.ring.current));
  }

  async decode(payloads: Payload[]): Promise<Payload[]> {
    return payloads.map((payload) => (isEncryptedPayload(payload) ? decryptPayload(payload, this.ring) : payload));
  }
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
