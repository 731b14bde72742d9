import { readFileSync } from 'node:fs';
import { parsePayloadKeyRing, PayloadKeyRingError, type PayloadKeyRing } from './key-ring.js';
import type { PlaintextPolicy } from './encryption-codec.js';

/**
 * How this process's payloads travel to and from Temporal: the key ring (null: in clear) and
 * whether a payload in clear is read. Every process of a deployment resolves it the same way from
 * the same settings, so a worker and the clients that start its charges agree:
 *
 * - CHARGEGUARD_PAYLOAD_KEYS, the ring itself, or CHARGEGUARD_PAYLOAD_KEYS_FILE, a file holding it
 *   (what the embedded stack generates in its data dir, and what `start` prints for other
 *   terminals: the keys stay off screens and process listings, as PGPASSFILE keeps the passwords);
 * - CHARGEGUARD_PAYLOAD_PLAINTEXT=accept: payloads in clear are read (and, without keys, written).
 *   Without keys and without it, the process refuses to start: the deployment must say which.
 */
export interface PayloadProtection {
  ring: PayloadKeyRing | null;
  plaintext: PlaintextPolicy;
  /** Where the keys came from, for start-up lines and errors: a setting's name, never key material. */
  source: string;
}

export interface PayloadSettings {
  CHARGEGUARD_PAYLOAD_KEYS?: string | undefined;
  CHARGEGUARD_PAYLOAD_KEYS_FILE?: string | undefined;
  CHARGEGUARD_PAYLOAD_PLAINTEXT?: string | undefined;
}

export const plaintextPolicies = ['refuse', 'accept'] as const satisfies readonly PlaintextPolicy[];

/** A file of keys is a few lines; anything larger is not one. */
const keyFileMaxBytes = 64 * 1024;

/** Settings that cannot work; the message names the settings, never key material. */
export class PayloadProtectionError extends Error {
  override readonly name = 'PayloadProtectionError';
}

/** What a process without keys is told: both ways out, by name. */
export const missingPayloadKeysMessage =
  'payload encryption is not configured: set CHARGEGUARD_PAYLOAD_KEYS (or CHARGEGUARD_PAYLOAD_KEYS_FILE, as `chargeguard start` prints it) ' +
  'to the keys the deployment\'s workers use, or set CHARGEGUARD_PAYLOAD_PLAINTEXT=accept to send and read payloads in clear (docs/back-door.md)';

export function plaintextPolicyOf(setting: string | undefined): PlaintextPolicy {
  const value = setting?.trim() ?? '';
  if (value === '') return 'refuse';
  if ((plaintextPolicies as readonly string[]).includes(value)) return value as PlaintextPolicy;
  throw new PayloadProtectionError(`CHARGEGUARD_PAYLOAD_PLAINTEXT=${value} is not one of ${plaintextPolicies.join(', ')}`);
}

/** Reads and parses a key file; errors name the setting and the path. */
export function readPayloadKeyFile(path: string, settingName = 'CHARGEGUARD_PAYLOAD_KEYS_FILE'): PayloadKeyRing {
  let text: string;
  try {
    const content = readFileSync(path);
    if (content.length > keyFileMaxBytes) throw new PayloadProtectionError(`${settingName}=${path} is larger than ${keyFileMaxBytes} bytes: not a key file`);
    text = content.toString('utf8');
  } catch (error) {
    if (error instanceof PayloadProtectionError) throw error;
    const code = (error as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'is a directory' : (error as Error).message;
    throw new PayloadProtectionError(`${settingName}=${path} cannot be read: ${why}`);
  }
  // One entry per line or comma-separated; `#` starts a comment line.
  const entries = text
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .join(',');
  const ring = parsePayloadKeyRing(entries, `${settingName} (${path})`);
  if (ring === null) throw new PayloadProtectionError(`${settingName}=${path} holds no key`);
  return ring;
}

/**
 * The protection the settings describe. Throws PayloadProtectionError (or PayloadKeyRingError for a
 * malformed key) naming the setting when they cannot work: both key settings at once, a file that
 * cannot be read, or neither keys nor an explicit acceptance of plaintext.
 */
export function payloadProtectionFromSettings(settings: PayloadSettings): PayloadProtection {
  const plaintext = plaintextPolicyOf(settings.CHARGEGUARD_PAYLOAD_PLAINTEXT);
  const inline = settings.CHARGEGUARD_PAYLOAD_KEYS?.trim() ? settings.CHARGEGUARD_PAYLOAD_KEYS : undefined;
  const file = settings.CHARGEGUARD_PAYLOAD_KEYS_FILE?.trim() || undefined;
  if (inline !== undefined && file !== undefined) {
    throw new PayloadProtectionError('CHARGEGUARD_PAYLOAD_KEYS and CHARGEGUARD_PAYLOAD_KEYS_FILE are both set: use one of them');
  }
  if (inline !== undefined) return { ring: parsePayloadKeyRing(inline), plaintext, source: 'CHARGEGUARD_PAYLOAD_KEYS' };
  if (file !== undefined) return { ring: readPayloadKeyFile(file), plaintext, source: `CHARGEGUARD_PAYLOAD_KEYS_FILE=${file}` };
  if (plaintext === 'accept') return { ring: null, plaintext, source: 'CHARGEGUARD_PAYLOAD_PLAINTEXT=accept, no keys' };
  throw new PayloadProtectionError(missingPayloadKeysMessage);
}

/** The payload settings as environment variables for a child process: the ones that are set. */
export function payloadEnvironment(settings: PayloadSettings): Record<string, string> {
  const names = ['CHARGEGUARD_PAYLOAD_KEYS', 'CHARGEGUARD_PAYLOAD_KEYS_FILE', 'CHARGEGUARD_PAYLOAD_PLAINTEXT'] as const;
  return Object.fromEntries(names.flatMap((name) => (settings[name] !== undefined ? [[name, settings[name]]] : [])));
}

/** From this process's environment: what a worker built without explicit settings reads. */
export function payloadProtectionFromEnvironment(env: NodeJS.ProcessEnv = process.env): PayloadProtection {
  return payloadProtectionFromSettings(env);
}

/** One line for start-up logs: the key ids and where they came from, never key material. */
export function describePayloadProtection(protection: PayloadProtection): string {
  const keys = protection.ring === null ? 'no keys, payloads in clear' : `keys ${[...protection.ring.byId.keys()].join(', ')} (${protection.ring.current.id} encrypts)`;
  return `payload encryption: ${keys}, plaintext ${protection.plaintext === 'accept' ? 'accepted' : 'refused'}; from ${protection.source}`;
}

export { PayloadKeyRingError };
