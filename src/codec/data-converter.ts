import type { DataConverter } from '@temporalio/common';
import { EncryptionCodec } from './encryption-codec.js';
import { parsePayloadKeyRing, type PayloadKeyRing } from './key-ring.js';

/**
 * The data converter every Temporal client and worker of the service uses: payloads encrypted with
 * the key ring when one is configured, in clear (Temporal's default converter) when not. Clients and
 * workers must agree: a worker without the keys cannot read what an encrypting client started.
 */
export function payloadDataConverter(ring: PayloadKeyRing | null): DataConverter {
  return ring === null ? {} : { payloadCodecs: [new EncryptionCodec(ring)] };
}

/** From CHARGEGUARD_PAYLOAD_KEYS as set (or not) in this environment. */
export function payloadDataConverterFromEnvironment(env: NodeJS.ProcessEnv = process.env): DataConverter {
  return payloadDataConverter(parsePayloadKeyRing(env.CHARGEGUARD_PAYLOAD_KEYS));
}

/** From the service's validated configuration. */
export function payloadDataConverterFromConfig(config: { CHARGEGUARD_PAYLOAD_KEYS?: string | undefined }): DataConverter {
  return payloadDataConverter(parsePayloadKeyRing(config.CHARGEGUARD_PAYLOAD_KEYS));
}
