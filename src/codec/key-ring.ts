/**
 * The payload encryption keys, from CHARGEGUARD_PAYLOAD_KEYS (or the file CHARGEGUARD_PAYLOAD_KEYS_FILE
 * names): `<id>:<base64 of 32 bytes>` separated by commas. The first key encrypts; every key
 * decrypts. Rotation takes two steps, because a worker refuses a payload under a key it lacks:
 * first add the new key last on every process, then put it first; keep the old ones after it for as
 * long as any history (retention) or running charge may hold a payload they encrypted.
 */

import { createHmac } from 'node:crypto';

/** AES-256: 32 bytes of key. */
export const payloadKeyBytes = 32;
/** Key ids travel in every payload's metadata and in error messages: short, and nothing to escape. */
const keyIdPattern = /^[A-Za-z0-9._-]{1,64}$/;
/** Canonical base64 only: a key that decodes "somehow" is a key someone mistyped. */
const base64Pattern = /^[A-Za-z0-9+/]+={0,2}$/;

export function isWellFormedKeyId(id: string): boolean {
  return keyIdPattern.test(id);
}

export interface PayloadKey {
  id: string;
  key: Buffer;
}

export interface PayloadKeyRing {
  /** The key new payloads are encrypted with. */
  current: PayloadKey;
  /** Every key, by id, for decryption. */
  byId: ReadonlyMap<string, PayloadKey>;
}

export class PayloadKeyRingError extends Error {
  override readonly name = 'PayloadKeyRingError';
}

/**
 * Parses the setting; null when it is unset or blank (encryption off). Errors name the setting and
 * the entry's position or id, never key material.
 */
export function parsePayloadKeyRing(setting: string | undefined, settingName = 'CHARGEGUARD_PAYLOAD_KEYS'): PayloadKeyRing | null {
  if (setting === undefined || setting.trim() === '') return null;
  const keys: PayloadKey[] = [];
  const byId = new Map<string, PayloadKey>();
  setting.split(',').forEach((entry, index) => {
    const position = `${settingName} entry ${index + 1}`;
    const colon = entry.indexOf(':');
    if (colon < 0) throw new PayloadKeyRingError(`${position} is not <key id>:<base64 key>`);
    const id = entry.slice(0, colon).trim();
    const encoded = entry.slice(colon + 1).trim();
    if (!keyIdPattern.test(id)) throw new PayloadKeyRingError(`${position}: the key id must be 1 to 64 of A-Z a-z 0-9 . _ -`);
    if (byId.has(id)) throw new PayloadKeyRingError(`${position}: key id ${id} is given twice`);
    const key = Buffer.from(encoded, 'base64');
    if (!base64Pattern.test(encoded) || key.toString('base64') !== encoded || key.length !== payloadKeyBytes) {
      throw new PayloadKeyRingError(
        `${position}: key ${id} must be ${payloadKeyBytes} bytes in base64 (${Math.ceil(payloadKeyBytes / 3) * 4} characters; openssl rand -base64 ${payloadKeyBytes})`,
      );
    }
    const entryKey = { id, key };
    keys.push(entryKey);
    byId.set(id, entryKey);
  });
  return { current: keys[0]!, byId };
}

/** 64 bits: enough to tell two keys apart, nothing to learn a key from. */
const keyCheckValueBytes = 8;

/**
 * A key's check value: the first bytes of HMAC-SHA256 under the key of a fixed label, as payment
 * systems publish a key check value beside a key's id. Processes compare these to learn whether
 * they hold the same key under an id without showing each other the key; HMAC is a PRF, so the
 * value says nothing about the key.
 */
export function keyCheckValue(key: PayloadKey): string {
  return createHmac('sha256', key.key).update('chargeguard payload key check v1').digest().subarray(0, keyCheckValueBytes).toString('hex');
}
